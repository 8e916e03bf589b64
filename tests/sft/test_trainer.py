"""The SFT stage: the row layout keeps every target token in place, the loss is the hand-computed NLL."""

import jax
import numpy as np
import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import forward, init_params
from swerl_jax.sft.trainer import make_packed_sft_loss, make_sft_loss, packed_rows, sft_rows

MODEL = get_model_config("tiny")


def _loader_batch():
    # what the SFT loader yields: unpadded prompt ids and target (answer + eot) ids; loss on the target only
    rows = [([3, 4, 5], [6, 7]), ([9], [10, 11, 12, 13]), ([1, 2, 3, 4, 5, 6], [7])]
    return {"prompt_ids": [np.asarray(p, np.int32) for p, _ in rows],
            "target_ids": [np.asarray(t, np.int32) for _, t in rows],
            "prompt_len": np.asarray([3, 1, 6], np.int32)}, rows


MAX_LEN = 12  # sft.max_len: caps both buckets


def test_sft_rows_put_prompt_left_and_target_right():
    batch, rows = _loader_batch()
    out, p, c = sft_rows(batch, MAX_LEN, prompt_bucket=4, target_bucket=2)
    assert (p, c) == (8, 4)
    for i, (prompt, target) in enumerate(rows):
        assert out["tokens"][i, p - len(prompt):p].tolist() == prompt
        assert out["tokens"][i, p:p + len(target)].tolist() == target
        assert out["attention_mask"][i].sum() == len(prompt) + len(target)
        assert out["loss_mask"][i].tolist() == [1.0] * len(target) + [0.0] * (c - len(target))


def test_sft_loss_is_the_target_nll():
    batch, rows = _loader_batch()
    out, p, c = sft_rows(batch, MAX_LEN, prompt_bucket=4, target_bucket=2)
    params = init_params(MODEL, jax.random.key(0))
    loss, aux = jax.jit(make_sft_loss(MODEL, p, c))(params, out)
    # reference: full logits of each unpadded row, log-softmax at each target position
    total, n = 0.0, 0
    for prompt, target in rows:
        seq = np.asarray([prompt + target], np.int32)
        logits = np.asarray(forward(MODEL, params, seq), np.float64)[0]
        logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - \
            logits.max(-1, keepdims=True)
        for k, tok in enumerate(target):
            total -= logp[len(prompt) - 1 + k, tok]
            n += 1
    assert float(aux["num_tokens"]) == n == float(aux["loss_weight"])
    np.testing.assert_allclose(float(loss), total / n, rtol=1e-5)


def _weighted_batch():
    """Seven examples of 2 to 11 tokens, prompt tokens weighted 0.5 as `sft.prompt_loss_weight` does."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, MODEL.vocab_size, n).astype(np.int32) for n in (1, 1, 3, 1, 5, 1, 2)]
    targets = [rng.integers(1, MODEL.vocab_size, n).astype(np.int32) for n in (10, 4, 6, 1, 6, 2, 3)]
    masks = [np.concatenate([np.full(len(t) - 2, 0.5, np.float32), np.ones(2, np.float32)]) if len(t) > 2 else
             np.ones(len(t), np.float32) for t in targets]
    return {"prompt_ids": prompts, "target_ids": targets, "target_mask": masks}


def test_packed_rows_hold_whole_examples_side_by_side():
    batch = _weighted_batch()
    out = packed_rows(batch, row_multiple=4)
    n, width = out["tokens"].shape
    assert width == 64 and n == 4  # 11 tokens rounded up to 64; everything fits one row, padded to 4 rows
    seen = []
    for r in range(n):
        for s in range(1, out["segment_ids"][r].max() + 1):
            cols = np.flatnonzero(out["segment_ids"][r] == s)
            assert (np.diff(cols) == 1).all() and out["positions"][r, cols].tolist() == list(range(len(cols)))
            seen.append(out["tokens"][r, cols].tolist())
    examples = [np.concatenate([p, t]).tolist() for p, t in zip(batch["prompt_ids"], batch["target_ids"])]
    assert sorted(seen) == sorted(examples)
    assert out["loss_mask"].sum() == pytest.approx(sum(m.sum() for m in batch["target_mask"]))
    assert not out["attention_mask"][1:].any()


def test_packed_loss_and_gradient_equal_the_padded_ones():
    """The same weighted token-mean, whether each example has its row or shares one: examples do not see each
    other (a leak would change every later example's log-probs) and RoPE restarts in each."""
    batch = _weighted_batch()
    params = init_params(MODEL, jax.random.key(1))
    rows, p, c = sft_rows(batch, 64, prompt_bucket=4, target_bucket=4)
    padded = jax.jit(jax.value_and_grad(make_sft_loss(MODEL, p, c), has_aux=True))(params, rows)
    packed = packed_rows(batch, row_multiple=1)
    assert packed["tokens"].shape[0] == 1  # all seven in one row: the test of isolation
    together = jax.jit(jax.value_and_grad(make_packed_sft_loss(MODEL), has_aux=True))(params, packed)
    (loss_a, aux_a), grad_a = padded
    (loss_b, aux_b), grad_b = together
    assert float(aux_a["num_tokens"]) == float(aux_b["num_tokens"])
    np.testing.assert_allclose(float(loss_b), float(loss_a), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(grad_a), jax.tree.leaves(grad_b), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-4, atol=2e-6)


def test_sft_rows_reject_a_row_longer_than_max_len():
    batch, _ = _loader_batch()
    batch["target_ids"][1] = np.arange(13, dtype=np.int32)  # 13 target tokens > sft.max_len
    with pytest.raises(ValueError, match="length 13 exceeds the cap 12"):
        sft_rows(batch, MAX_LEN, prompt_bucket=4, target_bucket=2)



@pytest.mark.parametrize("pack", [False, True])
def test_sft_trainer_runs_in_process(tmp_path, pack):
    """SFTTrainer.run itself (not a subprocess): 2 steps of tiny_cpu's SFT stage on the suite's 8 fake devices,
    metrics and a final checkpoint written, the loss falling on the repeated oracle answers; packed rows too
    (their count a multiple of the 8 batch shards)."""
    from experiments import tiny_cpu
    from swerl_jax.runs.metrics import read_metrics
    from swerl_jax.sft.trainer import SFTTrainer

    config = tiny_cpu.get_config()
    config.sft.num_steps, config.sft.batch_size = 3, 8
    config.logging.progress_bar = False
    config.mesh.name = "cpu8"
    config.sft.pack = pack
    trainer = SFTTrainer(config, tmp_path)
    params = trainer.run()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[-1]["loss"] < rows[0]["loss"]
    assert rows[-1]["data/kept"] == 24 and np.isfinite(rows[-1]["grad_norm"])
    assert (tmp_path / "checkpoints" / "3").is_dir()
    assert jax.tree.leaves(params)[0].shape == jax.tree.leaves(trainer.policy.state.params)[0].shape


def test_a_token_past_the_vocabulary_is_an_error_not_a_clamp():
    import types

    import numpy as np
    import pytest

    from swerl_jax.sft.trainer import check_token_ids

    model = types.SimpleNamespace(name="tiny", tokenizer="")
    check_token_ids(np.asarray([[0, 511]]), 512, model)
    with pytest.raises(ValueError, match=r"token id 512 is outside model.name='tiny'.*vocabulary of 512.*"
                                         r"model.tokenizer='smollm2'"):
        check_token_ids(np.asarray([[3, 512]]), 512, model)
