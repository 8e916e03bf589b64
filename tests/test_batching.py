"""swerl_jax.batching: the one row layout, and a PR record's prompt padded exactly once between the Grain loader and
the loss, for GRPO and for SFT."""

from __future__ import annotations

import numpy as np
import pytest

from swerl_jax import batching
from swerl_jax.data.loader import rl_dataset, sft_dataset
from swerl_jax.data.prompts import build_prompt
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.reward.service import RewardService
from swerl_jax.rl import rollouts as rollouts_mod
from swerl_jax.rl.collect import collect_rollouts
from swerl_jax.sampler.types import Completion, SamplingParams
from swerl_jax.sft import trainer as sft_trainer
from swerl_jax.tokenizer import load_tokenizer

ONE = {"shard_index": 0, "shard_count": 1}


def test_pack_rows_layout_by_hand():
    rows = batching.pack_rows([[5, 6, 7], [5]], [[8, 9], [1, 2, 3]], prompt_len=4, completion_len=3)
    np.testing.assert_array_equal(rows["tokens"], [[0, 5, 6, 7, 8, 9, 0], [0, 0, 0, 5, 1, 2, 3]])
    np.testing.assert_array_equal(rows["attention_mask"], [[0, 1, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]])
    np.testing.assert_array_equal(rows["loss_mask"], [[1, 1, 0], [1, 1, 1]])
    assert rows["tokens"].dtype == np.int32 and rows["loss_mask"].dtype == np.float32
    with pytest.raises(ValueError, match="row 1: prompt 1 or completion 3 tokens exceed"):
        batching.pack_rows([[5], [5]], [[8], [1, 2, 3]], prompt_len=4, completion_len=2)


def test_row_shape_buckets_each_side():
    assert batching.row_shape([[1] * 65, [1]], [[], [2] * 3], prompt_bucket=64, completion_bucket=32,
                              prompt_cap=1024, completion_cap=256) == (128, 32)
    assert batching.row_shape([[1] * 1000], [[2] * 300], prompt_bucket=64, completion_bucket=32,
                              prompt_cap=1000, completion_cap=256 + 64) == (1000, 320)


class _Counting:
    """Wraps pack_rows where a trainer module imported it, counting calls."""

    def __init__(self, monkeypatch, module):
        self.calls = 0
        original = module.pack_rows

        def counted(*a, **k):
            self.calls += 1
            return original(*a, **k)

        monkeypatch.setattr(module, "pack_rows", counted)


class _EchoSampler:
    """Answers every prompt with its record's oracle answer (the prompt tokens are what the loader sent)."""

    def __init__(self, answers: dict[int, str], seen: list):
        self.answers, self.seen = answers, seen

    def generate(self, prompts, sampling=SamplingParams(), num_samples=1, seed=0, min_policy_version=0):
        out = []
        for i, p in enumerate(prompts):
            self.seen.append(np.asarray(p))
            out.append([Completion(i, s, np.asarray([7, 8, 9], np.int32), np.zeros(3, np.float32),
                                   self.answers[i], "stop", len(p), 3, 0) for s in range(num_samples)])
        return out


def test_grpo_prompt_is_padded_once_between_loader_and_loss(monkeypatch):
    records = synthetic_records(3, seed=4)
    tok = load_tokenizer()
    batch = next(iter(rl_dataset(records, batch_size=3, max_prompt_len=1024, shuffle=False, **ONE)))
    want = [np.asarray(build_prompt(r, tok, 1024).ids, np.int32) for r in records]
    # 1. the loader's rows are exactly the prompt tokens: nothing padded yet
    for got, w in zip(batch["prompt_ids"], want, strict=True):
        np.testing.assert_array_equal(got, w)
    seen: list = []
    sampler = _EchoSampler({i: oracle_solution(r) for i, r in enumerate(records)}, seen)
    with RewardService(num_workers=1) as service:
        groups, _ = collect_rollouts(sampler, service, batch, SamplingParams(), num_samples=2, step=1, seed=0,
                                     policy_version=0)
    # 2. the sampler got the same unpadded tokens (the collector strips nothing)
    for got, w in zip(seen, want, strict=True):
        np.testing.assert_array_equal(got, w)
    # 3. the train batch is padded by pack_rows, once, and its prompt window holds the prompt exactly
    counter = _Counting(monkeypatch, rollouts_mod)
    rows = rollouts_mod.build_train_batch(groups, prompt_len=1024, completion_len=4,
                                          advantages=np.zeros((len(groups), 2)))
    assert counter.calls == 1
    for n, row in enumerate(rows["tokens"]):
        w = want[n // 2]
        np.testing.assert_array_equal(row[1024 - len(w):1024], w)
        assert not rows["attention_mask"][n, :1024 - len(w)].any() and (row[:1024 - len(w)] == batching.PAD_ID).all()


def test_sft_prompt_is_padded_once_between_loader_and_loss(monkeypatch):
    records = synthetic_records(2, seed=5)
    tok = load_tokenizer()
    batch = next(iter(sft_dataset(records, batch_size=2, max_len=1024, shuffle=False, **ONE)))
    counter = _Counting(monkeypatch, sft_trainer)
    rows, p, c = sft_trainer.sft_rows(batch, max_len=1024)
    assert counter.calls == 1
    for i, r in enumerate(records):
        prompt = np.asarray(build_prompt(r, tok, 1024).ids, np.int32)
        np.testing.assert_array_equal(batch["prompt_ids"][i], prompt)  # the loader did not pad it
        np.testing.assert_array_equal(rows["tokens"][i, p - len(prompt):p], prompt)
        assert not rows["attention_mask"][i, :p - len(prompt)].any()
        target = batch["target_ids"][i]
        np.testing.assert_array_equal(rows["tokens"][i, p:p + len(target)], target)
        assert rows["loss_mask"][i].sum() == len(target)
