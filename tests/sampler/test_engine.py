"""The generation engine on tiny random models: transformers greedy parity, log-probs, seeds, buckets, stops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import load_hf
from swerl_jax.model.llama import token_logprobs
from swerl_jax.sampler.engine import RequestTooLarge, SamplingEngine, SamplingParams
from tests.model.hf_models import hf_greedy, save_random_hf

PROMPTS = [[11, 12, 13, 14, 15], [300, 7, 9], [42] * 12, [5, 400, 401, 402, 403, 404, 405, 406, 407]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(config, params, HF model): a random HF model written by transformers, read with load_hf."""
    out = tmp_path_factory.mktemp("tiny_hf")
    hf_model = save_random_hf(get_model_config("tiny-gqa-untied"), out, seed=3)
    config, params = load_hf(out)
    return config, params, hf_model


@pytest.fixture(scope="module")
def engine(tiny):
    config, params, _ = tiny
    return SamplingEngine(config, params, max_batch=16, max_prompt_len=32, max_new_tokens=24)


def test_greedy_equals_transformers_generate(tiny, engine):
    """Batched, left-padded engine greedy == HF greedy on each prompt alone (token for token)."""
    _, _, hf_model = tiny
    groups = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=20))
    for prompt, group in zip(PROMPTS, groups):
        c = group[0]
        assert c.finish_reason == "length" and c.completion_length == 20
        assert c.tokens.tolist() == hf_greedy(hf_model, prompt, 20)


def max_logprob_mismatch(config, params, prompts, groups, temperature, width=64):
    """Largest |sampler - token_logprobs(temperature)| over all completions (one right-padded batch)."""
    rows, spans = [], []
    for prompt, group in zip(prompts, groups):
        for c in group:
            rows.append(list(prompt) + c.tokens.tolist())
            spans.append((len(prompt) - 1, c.logprobs))
    tokens = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), bool)
    for i, r in enumerate(rows):
        tokens[i, :len(r)], mask[i, :len(r)] = r, True
    lp = np.asarray(token_logprobs(config, params, jnp.asarray(tokens), jnp.asarray(mask), temperature=temperature))
    return max(float(np.abs(lp[i, s:s + ref.size] - ref).max()) for i, (s, ref) in enumerate(spans))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_training_side_token_logprobs(tiny, engine, temperature):
    """Sampler log-probs == token_logprobs(temperature=T) of the trainer on the same tokens, <= 1e-4 (fp32)."""
    config, params, _ = tiny
    groups = engine.generate(PROMPTS, SamplingParams(temperature=temperature, max_new_tokens=24), num_samples=3,
                             seed=7)
    worst = max_logprob_mismatch(config, params, PROMPTS, groups, temperature)
    print(f"max |sampler - trainer| logprob at T={temperature}: {worst:.2e}")
    assert worst <= 1e-4


def test_seeded_reproducible_and_independent_of_batch_padding(engine):
    sp = SamplingParams(temperature=1.0, top_p=0.95, top_k=50, max_new_tokens=16)
    a = engine.generate(PROMPTS, sp, num_samples=3, seed=11)
    b = engine.generate(PROMPTS, sp, num_samples=3, seed=11)
    assert [[c.tokens.tolist() for c in g] for g in a] == [[c.tokens.tolist() for c in g] for g in b]
    # The same prompt alone (other buckets: fewer rows) draws the same samples: keys are per (prompt, sample).
    alone = engine.generate(PROMPTS[:1], sp, num_samples=3, seed=11)
    assert [c.tokens.tolist() for c in alone[0]] == [c.tokens.tolist() for c in a[0]]
    c = engine.generate(PROMPTS, sp, num_samples=3, seed=12)
    assert [[x.tokens.tolist() for x in g] for g in a] != [[x.tokens.tolist() for x in g] for g in c]
    # Samples of one prompt differ from each other (fresh keys per sample).
    assert len({tuple(x.tokens.tolist()) for x in a[1]}) > 1


def test_top_k_one_is_greedy(engine):
    greedy = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=12))
    topk1 = engine.generate(PROMPTS, SamplingParams(temperature=1.3, top_k=1, max_new_tokens=12), seed=5)
    assert [g[0].tokens.tolist() for g in greedy] == [g[0].tokens.tolist() for g in topk1]


def test_no_recompiles_across_steps_and_weight_updates(tiny):
    config, params, _ = tiny
    eng = SamplingEngine(config, params, max_batch=16, max_prompt_len=32, max_new_tokens=16)
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    eng.generate(PROMPTS, sp, num_samples=4, seed=0)
    first = eng.compile_count
    assert first == 1
    for step in range(3):  # a GRPO loop: new weights, new prompts of other lengths in the same buckets
        eng.update_params(jax.tree.map(lambda x: x * 1.01, params), version=step + 1)
        out = eng.generate([p[:-1] for p in PROMPTS], sp, num_samples=4, seed=step)
        assert out[0][0].policy_version == step + 1
    assert eng.compile_count == first


def test_stop_tokens_and_per_sequence_max_new_tokens(tiny, engine):
    greedy = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=20))
    # Stop on the 6th greedy token of prompt 0: it ends there (stop token included), the others are unaffected
    # unless they produce it too.
    stop_tok = int(greedy[0][0].tokens[5])
    out = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=20, stop_token_ids=(stop_tok,)))
    for g_ref, g in zip(greedy, out):
        ref = g_ref[0].tokens.tolist()
        if stop_tok in ref:
            n = ref.index(stop_tok) + 1
            assert g[0].tokens.tolist() == ref[:n] and g[0].finish_reason == "stop"
        else:
            assert g[0].tokens.tolist() == ref and g[0].finish_reason == "length"
    capped = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=20), max_new_tokens=[3, 20, 7, 1])
    assert [g[0].completion_length for g in capped] == [3, 20, 7, 1]
    assert [g[0].tokens.tolist() for g in capped] == [g[0].tokens.tolist()[:n] for g, n in zip(greedy, [3, 20, 7, 1])]


def test_stop_strings_trim_text_tokens_and_logprobs(tiny):
    from swerl_jax.tokenizer import load_tokenizer
    config, params, _ = tiny
    tok = load_tokenizer("")
    eng = SamplingEngine(config, params, tokenizer=tok, max_batch=4, max_prompt_len=32, max_new_tokens=24)
    full = eng.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_new_tokens=24))[0][0]
    assert full.text == tok.decode(full.tokens.tolist(), skip_special_tokens=True)
    # A stop string made of the text of tokens 4..5 ends the completion at token 5.
    stop = tok.decode(full.tokens[4:6].tolist())
    cut = full.text.index(stop)
    out = eng.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_new_tokens=24, stop_strings=(stop,)))[0][0]
    assert out.finish_reason == "stop" and out.text == full.text[:cut]
    assert stop in tok.decode(out.tokens.tolist()) and stop not in tok.decode(out.tokens[:-1].tolist())
    np.testing.assert_array_equal(out.logprobs, full.logprobs[:out.completion_length])


def test_requests_larger_than_the_cache_are_refused(engine):
    with pytest.raises(RequestTooLarge, match="max_prompt_len"):
        engine.generate([[1] * 33], SamplingParams(max_new_tokens=4))
    with pytest.raises(RequestTooLarge, match="max_new_tokens"):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=25))
    with pytest.raises(RequestTooLarge, match="num_samples"):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=4), num_samples=17)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[1], []], SamplingParams(max_new_tokens=4))
    with pytest.raises(ValueError, match="top_p"):
        engine.generate([[1]], SamplingParams(top_p=0.0))


def test_more_sequences_than_max_batch_run_in_chunks(engine):
    prompts = [[i + 1, i + 2] for i in range(10)]
    out = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=4), num_samples=4, seed=3)
    assert len(out) == 10 and all(len(g) == 4 for g in out)
    assert [(c.prompt_index, c.sample_index) for c in out[9]] == [(9, j) for j in range(4)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_shared_prompt_cache_equals_copied_rows(tiny, engine, temperature):
    """GRPO groups with each prompt's K/V kept once (shared_prefix, the default) draw the same tokens as the
    engine that copies it to every sample row, with log-probs equal within 1e-5 (summation order only)."""
    config, params, _ = tiny
    copied = SamplingEngine(config, params, max_batch=16, max_prompt_len=32, max_new_tokens=24, shared_prefix=False)
    sp = SamplingParams(temperature=temperature, max_new_tokens=24)
    a = engine.generate(PROMPTS, sp, num_samples=4, seed=3)
    b = copied.generate(PROMPTS, sp, num_samples=4, seed=3)
    assert [[c.tokens.tolist() for c in g] for g in a] == [[c.tokens.tolist() for c in g] for g in b]
    worst = max(float(np.abs(x.logprobs - y.logprobs).max()) for ga, gb in zip(a, b) for x, y in zip(ga, gb))
    assert worst <= 1e-5, worst


def test_prompt_offset_continues_a_larger_request(tiny, engine):
    """generate(prompts[2:], prompt_offset=2) samples the last groups of generate(prompts): the same keys and
    prompt indices. Cut at the engine's own batch boundary (16 rows // 8 samples = 2 prompts) it runs the same
    batch, so the log-probs are bit-identical too; the continuous pool (other rows beside them) within 1e-5."""
    from swerl_jax.sampler.continuous import ContinuousEngine
    config, params, _ = tiny
    sp = SamplingParams(temperature=1.0, max_new_tokens=12)
    pool = ContinuousEngine(config, params, max_batch=6, max_prompt_len=32, max_new_tokens=24, segment=4)
    for eng, samples, tol in ((engine, 8, 0.0), (pool, 3, 1e-5)):
        whole = eng.generate(PROMPTS, sp, num_samples=samples, seed=4)
        part = eng.generate(PROMPTS[2:], sp, num_samples=samples, seed=4, prompt_offset=2)
        assert [[(c.prompt_index, c.sample_index) for c in g] for g in part] == \
               [[(i, j) for j in range(samples)] for i in (2, 3)]
        assert [[c.tokens.tolist() for c in g] for g in part] == [[c.tokens.tolist() for c in g] for g in whole[2:]]
        worst = max(float(np.abs(x.logprobs - y.logprobs).max()) for g, h in zip(part, whole[2:]) for x, y in zip(g, h))
        assert worst <= tol, (type(eng).__name__, worst)
        assert eng.generate(PROMPTS[2:], sp, num_samples=samples, seed=4)[0][0].tokens.tolist() != \
               whole[2][0].tokens.tolist()  # without the offset: prompt 0's keys
    with pytest.raises(ValueError, match="prompt_offset"):
        engine.generate(PROMPTS, sp, prompt_offset=-1)
