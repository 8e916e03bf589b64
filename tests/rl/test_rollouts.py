"""Rollout packing: the layout the GRPO loss scores, reward matrices, host-side metrics."""

import numpy as np
import pytest

from swerl_jax.batching import bucket_length
from swerl_jax.rl.rollouts import Rollout, build_train_batch, flatten_groups, reward_matrix, rollout_metrics


def _rollout(group, sample, prompt, completion, reward, finish="stop", info=None):
    return Rollout(prompt_id=f"p{group}", group=group, sample=sample, prompt_tokens=np.asarray(prompt, np.int32),
                   completion_tokens=np.asarray(completion, np.int32),
                   sampler_logprobs=-np.arange(1, len(completion) + 1, dtype=np.float32) / 10,
                   finish_reason=finish, completion="x", reward=reward, reward_info=info or {})


def test_train_batch_layout():
    rs = [_rollout(0, 0, [5, 6, 7], [8, 9], 0.5), _rollout(0, 1, [5], [1, 2, 3], -1.0, "length")]
    b = build_train_batch([rs], prompt_len=4, completion_len=3, advantages=np.asarray([[1.5, -1.5]]))  # one group
    np.testing.assert_array_equal(b["tokens"], [[0, 5, 6, 7, 8, 9, 0], [0, 0, 0, 5, 1, 2, 3]])
    np.testing.assert_array_equal(b["attention_mask"], [[0, 1, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]])
    np.testing.assert_array_equal(b["loss_mask"], [[1, 1, 0], [1, 1, 1]])
    np.testing.assert_allclose(b["old_logp"], [[-0.1, -0.2, 0], [-0.1, -0.2, -0.3]], rtol=1e-6)
    np.testing.assert_array_equal(b["advantages"], [1.5, -1.5])
    np.testing.assert_array_equal(b["truncated"], [False, True])
    # completion token j sits at column prompt_len + j: the loss window [prompt_len - 1, prompt_len - 1 + C)
    # predicts exactly the completion tokens
    assert (b["tokens"][:, 4:] == np.asarray([[8, 9, 0], [1, 2, 3]])).all()
    with pytest.raises(ValueError, match="exceed the batch shape"):
        build_train_batch([rs], prompt_len=2, completion_len=3, advantages=np.zeros((1, 2)))


def test_reward_matrix_and_missing():
    groups = [[_rollout(g, s, [1], [2], float(g + s)) for s in range(3)] for g in range(2)]
    np.testing.assert_array_equal(reward_matrix(groups, 3), [[0, 1, 2], [1, 2, 3]])
    assert [(r.group, r.sample) for r in flatten_groups(groups)] == [(g, s) for g in range(2) for s in range(3)]
    with pytest.raises(ValueError, match=r"\(1, 2\)"):
        reward_matrix([groups[0], groups[1][:-1]], 3)


def test_rollout_metrics_counts_reasons():
    rs = [_rollout(0, 0, [1], [2, 3], -1.0, info={"reason": "no_blocks"}),
          _rollout(0, 1, [1], [2], -1.0, "length", info={"reason": "tag_count"}),
          _rollout(0, 2, [1], [2, 3, 4], 1.0), _rollout(0, 3, [1], [2], 0.25)]
    m = rollout_metrics(rs)
    assert m["format_error_rate"] == 0.5 and m["format_error/no_blocks"] == 0.25
    assert m["format_error/tag_count"] == 0.25 and m["truncated_frac"] == 0.25
    assert m["completion_len_mean"] == 1.75 and m["completion_len_max"] == 3 and m["reward_solved_frac"] == 0.25


def test_service_failures_are_not_format_errors():
    # A timeout (the reward ran past the service's limit) gets the fallback -1, the score of a format error,
    # but it says nothing about the answer's format: it has its own metric.
    rs = [_rollout(0, 0, [1], [2], -1.0, info={"reason": "timeout"}),
          _rollout(0, 1, [1], [2], -1.0, info={"reason": "crash"}),
          _rollout(0, 2, [1], [2], -1.0, info={"reason": "tag_count", "tag": "<think>"}),
          _rollout(0, 3, [1], [2], 0.0, info={"reason": "nonfinite"}),  # a fallback of 0.0
          _rollout(1, 0, [1], [2], 0.5), _rollout(1, 1, [1], [2], -1.0, info={"reason": "timeout"}),
          _rollout(1, 2, [1], [2], 1.0), _rollout(1, 3, [1], [2], -1.0, info={"reason": "no_blocks"})]
    m = rollout_metrics(rs)
    assert m["format_error_rate"] == 2 / 8 and m["format_error/tag_count"] == m["format_error/no_blocks"] == 1 / 8
    assert "format_error/timeout" not in m and "format_error/crash" not in m
    assert m["reward_timeout_rate"] == 2 / 8 and m["reward_failure_rate"] == 4 / 8
    assert m["reward_failure/timeout"] == 2 / 8 and m["reward_failure/crash"] == m["reward_failure/nonfinite"] == 1 / 8
    assert [r.format_error for r in rs[:4]] == [None, None, "tag_count", None]
    assert [r.reward_failure for r in rs[:4]] == ["timeout", "crash", None, "nonfinite"]
    row = rs[0].to_json(step=3, advantage=0.5)
    assert row["format_error"] is None and row["reward_failure"] == "timeout" and row["reward"] == -1.0
    assert row["advantage"] == 0.5  # the update's, handed over: a rollout carries none of its own
    clean = rollout_metrics(rs[4:5])
    assert clean["reward_timeout_rate"] == clean["reward_failure_rate"] == 0.0


def test_bucket_length():
    assert bucket_length(1, 64, 256) == 64 and bucket_length(65, 64, 256) == 128 and bucket_length(250, 64, 256) == 256
    assert bucket_length(129, 64, 4096) == 256 and bucket_length(1000, 64, 1500) == 1024
    assert bucket_length(1100, 64, 1500) == 1500
    with pytest.raises(ValueError):
        bucket_length(300, 64, 256)


def test_first_reward_failure_names_the_count_and_the_first_error():
    from swerl_jax.rl.rollouts import first_reward_failure

    rs = [_rollout(0, 0, [1], [2], 0.5), _rollout(0, 1, [1], [2], -1.0, info={"reason": "no_blocks"}),
          _rollout(0, 2, [1], [2], -1.0, info={"reason": "exception", "error": "ValueError('boom')"}),
          _rollout(0, 3, [1], [2], -1.0, info={"reason": "timeout"})]
    assert first_reward_failure(rs) == (2, "exception: ValueError('boom')")
    assert first_reward_failure(rs[:2]) is None
