"""Grain RL/SFT pipelines: shapes, padding, filter counts, sharding, per-epoch shuffle, Orbax restore.

The worker half (`python -m tests.data.test_loader OUT_DIR`) runs under launch/multiprocess_cpu.sh as 2 JAX
processes; each writes the instance ids its default (process) shard yields.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from swerl_jax.data.loader import (
    FirstRecords,
    data_metrics,
    filter_stats,
    record_source,
    restore_iterator,
    rl_dataset,
    rl_dataset_from_config,
    save_iterator,
    sft_dataset,
    sft_dataset_from_config,
    state_json,
)
from swerl_jax.data.prompts import build_prompt
from swerl_jax.data.records import write_records
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.tokenizer import load_tokenizer

REPO = Path(__file__).resolve().parents[2]
ONE = {"shard_index": 0, "shard_count": 1}


def _ids(batches) -> list[str]:
    return [i for b in batches for i in b["instance_id"]]


def _equal(x, y) -> bool:
    if isinstance(x, np.ndarray):
        return np.array_equal(x, y)
    if isinstance(x, list) and x and isinstance(x[0], np.ndarray):  # unpadded token ids, one array per row
        return len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y))
    return x == y


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)


def test_rl_batch_unpadded_prompts_with_reward_fields():
    records = synthetic_records(6, seed=0)
    tok = load_tokenizer()
    batch = next(iter(rl_dataset(records, batch_size=3, max_prompt_len=1024, shuffle=False, **ONE)))
    assert len(batch["prompt_ids"]) == 3 and "prompt_mask" not in batch  # padding is swerl_jax.batching's job
    for row, r in enumerate(records[:3]):
        want = build_prompt(r, tok, 1024).ids
        n = len(want)
        assert batch["prompt_len"][row] == n
        assert batch["prompt_ids"][row].dtype == np.int32
        assert np.array_equal(batch["prompt_ids"][row], want)  # exactly the prompt's tokens, no padding
        assert batch["instance_id"][row] == r["instance_id"]
        assert batch["code_context"][row] == r["code_context"]
        assert batch["oracle_new_content"][row] == r["oracle_new_content"]


def test_sft_batch_loss_on_target_only():
    records = synthetic_records(4, seed=1)
    tok = load_tokenizer()
    batch = next(iter(sft_dataset(records, batch_size=2, max_len=1024, shuffle=False, **ONE)))
    for row, r in enumerate(records[:2]):
        prompt, target = batch["prompt_ids"][row], batch["target_ids"][row]  # unpadded; the loss scores target
        p = build_prompt(r, tok, 1024)
        assert np.array_equal(prompt, p.ids) and batch["prompt_len"][row] == p.num_tokens
        assert tok.decode(target) == oracle_solution(r) + "<|im_end|>"
        assert len(prompt) + len(target) <= 1024 and prompt.dtype == target.dtype == np.int32


def test_sft_prompt_loss_weight_moves_the_prompt_into_the_weighted_target():
    from swerl_jax.sft.trainer import sft_rows

    records = synthetic_records(2, seed=1)
    plain = next(iter(sft_dataset(records, batch_size=2, max_len=1024, shuffle=False, **ONE)))
    both = next(iter(sft_dataset(records, batch_size=2, max_len=1024, shuffle=False, prompt_loss_weight=0.25,
                                 **ONE)))
    for row in range(2):
        prompt, target = plain["prompt_ids"][row], plain["target_ids"][row]
        assert np.array_equal(both["prompt_ids"][row], prompt[:1])  # the same sequence, cut after its first token
        assert np.array_equal(both["target_ids"][row], np.concatenate([prompt[1:], target]))
        np.testing.assert_array_equal(both["target_mask"][row], [0.25] * (len(prompt) - 1) + [1.0] * len(target))
    rows, _, _ = sft_rows(both, 1024)  # the weights reach the loss mask; padding stays 0
    n = len(both["target_ids"][0])
    assert rows["loss_mask"][0, :n].sum() == pytest.approx(0.25 * (len(plain["prompt_ids"][0]) - 1)
                                                           + len(plain["target_ids"][0]))
    assert not rows["loss_mask"][0, n:].any()


def test_filter_counts_reasons_and_streams_the_rest(tmp_path, caplog):
    records = synthetic_records(8, seed=2)
    records[3] = dict(records[3], problem_statement="very long issue " * 400)
    path = tmp_path / "r.jsonl"
    write_records(path, records)
    with open(path, "a") as f:
        f.write('{"instance_id": "x"\n' + json.dumps(
            dict(records[0], instance_id="y", oracle_new_content=records[0]["code_context"])) + "\n")
    it = iter(rl_dataset(record_source([path]), batch_size=2, max_prompt_len=1024, num_epochs=1,
                         drop_remainder=False, **ONE))
    got = _ids(it)
    assert sorted(got) == sorted(r["instance_id"] for i, r in enumerate(records) if i != 3)
    stats = filter_stats(it)
    assert stats["kept"] == 7
    assert stats["dropped"] == {"prompt longer than max_prompt_len": 1, "invalid record: <json>: malformed JSON": 1,
                                "invalid record: oracle_new_content: oracle identical to code_context": 1}
    # RL used to skip them without a word: the first of each reason is logged, every one is a step metric
    warned = [r.getMessage() for r in caplog.records if r.name == "swerl_jax.data"]
    assert len(warned) == 3 and any("oracle identical to code_context" in w and "'y'" in w for w in warned), warned
    assert data_metrics(it) == {"data": {"kept": 7, "dropped": stats["dropped"]}}


def test_nothing_fits_is_an_error_not_a_hang():
    records = synthetic_records(4, seed=2)
    it = iter(rl_dataset(records, batch_size=2, max_prompt_len=300, num_epochs=-1, **ONE))
    with pytest.raises(ValueError, match="every one of the 4 records.*max_prompt_len"):
        next(it)


def test_epochs_reshuffle_and_cover_everything():
    records = synthetic_records(10, seed=3)
    order = _ids(rl_dataset(records, batch_size=5, max_prompt_len=1024, num_epochs=2, seed=7, **ONE))
    first, second = order[:10], order[10:]
    assert sorted(first) == sorted(second) == sorted(r["instance_id"] for r in records)
    assert first != second  # each epoch has its own permutation
    again = _ids(rl_dataset(records, batch_size=5, max_prompt_len=1024, num_epochs=2, seed=7, **ONE))
    assert again == order  # seeded
    assert _ids(rl_dataset(records, batch_size=5, max_prompt_len=1024, num_epochs=1, seed=8, **ONE)) != first


def test_explicit_shards_are_disjoint_and_cover_the_data():
    records = synthetic_records(11, seed=4)
    seen = [set(_ids(rl_dataset(records, batch_size=1, max_prompt_len=1024, num_epochs=1, shard_index=i,
                                shard_count=3))) for i in range(3)]
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1:])
    assert set().union(*seen) == {r["instance_id"] for r in records}
    with pytest.raises(ValueError, match="shard_index"):
        rl_dataset(records, batch_size=1, max_prompt_len=64, shard_index=3, shard_count=3)


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_restore_mid_epoch_gives_the_uninterrupted_batches(tmp_path, workers):
    records = synthetic_records(9, seed=5)
    path = tmp_path / "r.arrayrecord"
    write_records(path, records)

    def make(workers):
        return iter(rl_dataset(record_source([path]), batch_size=2, max_prompt_len=1024, num_epochs=3, seed=1,
                               worker_count=workers, **ONE))

    # The reference runs in-process: the output must not depend on the number of worker processes either.
    reference = make(0)
    want = list(reference)  # 27 examples -> 13 full batches, the epochs run into each other
    assert len(want) == 13
    it = make(workers)
    for _ in range(6):  # stop mid-epoch 2
        next(it)
    save_iterator(it, tmp_path / "ckpt")
    saved = state_json(it)
    rest_1 = [next(it) for _ in range(7)]
    restored = restore_iterator(make(workers), tmp_path / "ckpt")
    assert state_json(restored) == saved
    rest_2 = list(restored)
    assert len(rest_2) == 7
    for a, b, c in zip(want[6:], rest_1, rest_2):
        assert _same(a, b) and _same(a, c)
    assert filter_stats(restored)["kept"] == 27
    for i in (it, restored, reference):
        if hasattr(i, "close"):
            i.close()


def test_restore_through_the_training_checkpointer(tmp_path):
    """The iterator inside swerl_jax.runs.checkpoint's async Orbax save: the state is taken at save time."""
    import jax.numpy as jnp

    from swerl_jax.runs.checkpoint import Checkpointer, abstract_like

    records = synthetic_records(7, seed=8)

    def make():
        return iter(rl_dataset(records, batch_size=2, max_prompt_len=1024, num_epochs=2, seed=3, **ONE))

    want = list(make())
    it = make()
    for _ in range(3):
        next(it)
    state = {"w": jnp.arange(4.0)}
    ckpt = Checkpointer(tmp_path, async_save=True)
    assert ckpt.save(3, state, data_iterator=it, force=True)
    rest = list(it)  # keeps reading while the save may still be in flight
    ckpt.wait_until_finished()
    restored = ckpt.restore_latest(abstract_like(state), data_iterator=make())
    ckpt.close()
    assert restored.step == 3
    again = list(restored.data_iterator)
    assert len(again) == len(rest) == len(want) - 3
    for a, b, c in zip(want[3:], rest, again):
        assert _same(a, b) and _same(a, c)


def test_jsonl_and_arrayrecord_sources_agree(tmp_path):
    records = synthetic_records(5, seed=6)
    write_records(tmp_path / "r.jsonl", records)
    write_records(tmp_path / "r.array_record", records)
    a = list(rl_dataset(record_source([tmp_path / "r.jsonl"]), batch_size=5, max_prompt_len=1024, num_epochs=1,
                        **ONE))
    b = list(rl_dataset(record_source([tmp_path / "r.array_record"]), batch_size=5, max_prompt_len=1024,
                        num_epochs=1, **ONE))
    assert len(a) == len(b) == 1 and _same(a[0], b[0])
    with pytest.raises(ValueError, match="only .jsonl or only"):
        record_source([tmp_path / "r.jsonl", tmp_path / "r.array_record"])


def test_real_records_through_the_pipeline(shared_data):
    it = iter(rl_dataset(record_source([shared_data / "pr_records_requests_flask.jsonl"]), batch_size=4,
                         max_prompt_len=16384, num_epochs=1, drop_remainder=False, **ONE))
    batches = list(it)
    assert sum(len(b["instance_id"]) for b in batches) == 17 and filter_stats(it)["dropped"] == {}
    assert max(int(b["prompt_len"].max()) for b in batches) > 9000  # real prompts are long


def test_jsonl_source_concurrent_reads(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from swerl_jax.data.loader import JsonlSource

    lines = [json.dumps({"i": i, "pad": "x" * (i * 37 % 500)}).encode() + b"\n" for i in range(200)]
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"".join(lines[:100]) + b"\n\n" + b"".join(lines[100:]))  # blank lines are skipped
    src = JsonlSource([path])
    assert len(src) == 200 and src.where(150) == f"{path}:153"
    order = np.random.default_rng(0).integers(0, 200, 20000)
    with ThreadPoolExecutor(8) as pool:  # Grain's prefetch threads share the source
        got = list(pool.map(src.__getitem__, order))
    assert got == [lines[i] for i in order]


def test_from_config_uses_synthetic_records_and_process_shard():
    from experiments.base import get_config

    c = get_config()
    c.data.synthetic_num_records = 6
    c.rl.prompts_per_step = 3
    batch = next(iter(rl_dataset_from_config(c)))
    assert len(batch["prompt_ids"]) == 3 and max(len(x) for x in batch["prompt_ids"]) <= c.data.max_prompt_len


def test_rl_seed_orders_the_grpo_prompts_and_leaves_the_sft_stage_and_records_alone():
    from experiments.base import get_config

    def first_ids(rl_seed: int, seed: int = 0) -> tuple[list, list]:
        c = get_config()
        c.seed, c.rl.seed = seed, rl_seed
        c.data.synthetic_num_records, c.rl.prompts_per_step, c.sft.batch_size = 12, 12, 12
        rl = next(iter(rl_dataset_from_config(c)))["instance_id"]
        sft = next(iter(sft_dataset_from_config(c)))
        return list(rl), list(sft["instance_id"])

    default, same, other = first_ids(-1), first_ids(0), first_ids(7)
    assert default == same  # -1: `seed`
    assert sorted(other[0]) == sorted(same[0]) and other[0] != same[0]  # the same records, another order
    assert other[1] == same[1]  # the SFT stage's batches do not read rl.seed


def test_rl_num_records_keeps_the_first_records_every_epoch():
    from experiments.base import get_config

    c = get_config()
    c.data.synthetic_num_records = 6
    c.data.rl_num_records = 2
    c.rl.prompts_per_step = 2
    it = iter(rl_dataset_from_config(c))
    expected = {r["instance_id"] for r in synthetic_records(6)[:2]}
    for _ in range(3):  # each batch is one whole epoch of the 2 records
        assert set(next(it)["instance_id"]) == expected
    view = FirstRecords(synthetic_records(6), 2)
    assert len(view) == 2 and view[-1] == view[1] and len(view[:5]) == 2
    with pytest.raises(IndexError, match="rl_num_records=2"):
        view[2]
    with pytest.raises(ValueError, match="data.rl_num_records"):
        FirstRecords(view, 0)


def worker(out_dir: str) -> None:
    """One of 2 JAX processes: read this process's default shard, save the iterator with Orbax."""
    from swerl_jax import sharding

    sharding.initialize_distributed()
    import jax

    records = synthetic_records(10, seed=9)
    it = iter(rl_dataset(records, batch_size=1, max_prompt_len=1024, num_epochs=1))
    ids = _ids(it)
    save_iterator(it, Path(out_dir, "ckpt"))
    Path(out_dir, f"ids_{jax.process_index()}.json").write_text(json.dumps(ids))


@pytest.mark.slow
def test_two_jax_processes_read_disjoint_shards(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["LOG_DIR"] = str(tmp_path / "logs")
    proc = subprocess.run(["bash", "launch/multiprocess_cpu.sh", "2", "1", sys.executable, "-m",
                           "tests.data.test_loader", str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = (set(json.loads((tmp_path / f"ids_{i}.json").read_text())) for i in range(2))
    assert a and b and not (a & b)
    assert a | b == {r["instance_id"] for r in synthetic_records(10, seed=9)}
    # Grain's Orbax handler wrote one state file per process.
    assert {"process_0-of-2.json", "process_1-of-2.json"} <= {p.name for p in (tmp_path / "ckpt").iterdir()}


if __name__ == "__main__":
    worker(sys.argv[1])


def test_a_config_whose_answers_cannot_fit_says_so():
    from experiments import tiny_cpu
    from swerl_jax.data.budget import answer_budget_warning

    config = tiny_cpu.get_config()
    assert answer_budget_warning(config) is None  # 192 new tokens hold the 104-168-token oracle answers
    config.sampler.max_new_tokens = 48
    warning = answer_budget_warning(config)
    assert warning.startswith("sampler.max_new_tokens=48 is shorter than the oracle answer of each of the first 2 RL")


def test_records_that_cannot_be_prompted_are_counted_not_raised(tmp_path, shared_data, monkeypatch):
    from swerl_jax.data import prompts
    from tests.data.test_prompts import appended_at_end_record

    appended = appended_at_end_record(shared_data)  # raised IndexError out of the loader (issue 57 item 1)
    records = [*synthetic_records(3, seed=4), appended]
    it = iter(rl_dataset(records, batch_size=1, max_prompt_len=1024, num_epochs=1, shuffle=False, **ONE))
    assert _ids(it) == [r["instance_id"] for r in records]
    # any failure of a record's prompt is a data/dropped reason, as a too-long prompt is
    real = prompts.build_prompt

    def broken(record, *a, **k):
        return [][0] if record["instance_id"] == records[1]["instance_id"] else real(record, *a, **k)

    monkeypatch.setattr(prompts, "build_prompt", broken)
    for ds in (rl_dataset(records, batch_size=1, max_prompt_len=1024, num_epochs=1, shuffle=False, **ONE),
               sft_dataset(records[:3], batch_size=1, max_len=1024, num_epochs=1, shuffle=False, **ONE)):
        it = iter(ds)
        assert records[1]["instance_id"] not in _ids(it)
        assert filter_stats(it)["dropped"] == {"prompt could not be built (IndexError)": 1}
