"""Advantage tables: grouping rollouts, the three estimators (vs hand formulas), zero-variance fraction."""

import numpy as np
import pytest

from swerl_jax.analysis.advantages import (
    advantage_vs_length,
    complete_groups,
    compute_advantages,
    estimator_summary,
    estimator_table,
    group_spread,
    step_groups,
    zero_variance_fraction,
)

REWARDS = np.array([[1.0, 0.0, 0.5, 0.5], [0.2, 0.2, 0.2, 0.2], [-1.0, 1.0, 0.0, 0.0]])


def _rollouts(rewards, step=1, lengths=None):
    return [{"step": step, "prompt_id": f"p{p}", "group": p, "sample": g, "reward": float(rewards[p][g]),
             "completion_len": None if lengths is None else lengths[p][g], "advantage": None}
            for p in range(len(rewards)) for g in range(len(rewards[p]))]


def test_estimators_match_hand_formulas():
    eps = 1e-6
    table = estimator_table(REWARDS, std_eps=eps)
    mean = REWARDS.mean(axis=1, keepdims=True)
    std = REWARDS.std(axis=1, keepdims=True)
    g = REWARDS.shape[1]
    loo = REWARDS - (REWARDS.sum(axis=1, keepdims=True) - REWARDS) / (g - 1)
    # float32 inside the estimator: tolerance 1e-5 relative.
    np.testing.assert_allclose(table["grpo"], (REWARDS - mean) / (std + eps), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(table["drgrpo"], REWARDS - mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(table["loo"], loo, rtol=1e-5, atol=1e-6)
    # Hand values for the first group: mean 0.5, std sqrt(0.125).
    np.testing.assert_allclose(table["drgrpo"][0], [0.5, -0.5, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(table["loo"][0], [2 / 3, -2 / 3, 0.0, 0.0], atol=1e-6)
    assert np.all(table["grpo"][1] == 0)  # zero-variance group: no signal


def test_ddof_changes_grpo_scale():
    a0 = compute_advantages(REWARDS[:1], "grpo", std_ddof=0)
    a1 = compute_advantages(REWARDS[:1], "grpo", std_ddof=1)
    np.testing.assert_allclose(a1, a0 * np.sqrt(3 / 4), rtol=1e-4)


def test_compute_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\[P, G\]"):
        compute_advantages(np.zeros(4), "grpo")
    with pytest.raises(ValueError, match="missing samples"):
        compute_advantages(np.array([[1.0, np.nan]]), "grpo")
    with pytest.raises(ValueError, match="rl.advantage"):
        compute_advantages(REWARDS, "bogus")


def test_step_groups_and_missing_samples():
    rows = _rollouts(REWARDS, step=2) + _rollouts([[0.0, 1.0]], step=1)
    rows = [r for r in rows if not (r["step"] == 2 and r["group"] == 2 and r["sample"] == 3)]
    s1, s2 = step_groups(rows)
    assert (s1.step, s2.step) == (1, 2)
    assert s2.prompt_ids == ["p0", "p1", "p2"] and s2.rewards.shape == (3, 4)
    assert np.isnan(s2.rewards[2, 3]) and np.isnan(s2.lengths).all()
    done = complete_groups(s2)
    assert done.prompt_ids == ["p0", "p1"]
    np.testing.assert_array_equal(done.rewards, REWARDS[:2])


def test_step_groups_rejects_conflicts():
    rows = _rollouts(REWARDS)
    with pytest.raises(ValueError, match="step 1: two rollouts for group 0 sample 1"):
        step_groups(rows + [dict(rows[1])])
    bad = dict(rows[1], prompt_id="other")
    with pytest.raises(ValueError, match="group 0 has prompt ids 'p0' and 'other'"):
        step_groups([rows[0], bad])


def test_zero_variance_fraction_and_spread():
    rows = _rollouts(REWARDS, step=1) + _rollouts([[1.0, 1.0], [0.0, 1.0]], step=2)
    assert zero_variance_fraction(step_groups(rows)) == ([1, 2], [1 / 3, 0.5])
    spread = group_spread(step_groups(rows)[0])
    assert [s["zero_var"] for s in spread] == [False, True, False]
    assert spread[0] == {"prompt_id": "p0", "n": 4, "mean": 0.5, "std": pytest.approx(np.sqrt(0.125)),
                         "min": 0.0, "max": 1.0, "zero_var": False}


def test_advantage_vs_length_and_summary():
    lengths = [[10, 20, 30, 40], [5, 5, 5, 5], [1, 2, 3, 4]]
    lens, advs = advantage_vs_length(step_groups(_rollouts(REWARDS, lengths=lengths)), "drgrpo")
    np.testing.assert_array_equal(lens, np.ravel(lengths))
    np.testing.assert_allclose(advs, np.ravel(REWARDS - REWARDS.mean(axis=1, keepdims=True)), atol=1e-6)
    summary = estimator_summary(estimator_table(REWARDS), REWARDS)
    assert [s["estimator"] for s in summary] == ["grpo", "drgrpo", "loo", "reinforce"]  # the registry, in order
    dr = summary[1]
    assert dr["max_abs"] == pytest.approx(1.0, abs=1e-6)
    assert dr["corr_with_reward"] == pytest.approx(
        np.corrcoef(np.ravel(REWARDS - REWARDS.mean(axis=1, keepdims=True)), np.ravel(REWARDS))[0, 1], abs=1e-5)


def test_estimator_table_reads_the_registry():
    """A variant registered with `register_advantage` appears in the default table (no hard-coded names)."""
    from swerl_jax.rl.objectives import ADVANTAGE_ESTIMATORS, register_advantage

    @register_advantage("test-centre")
    def _centre(rewards, std_eps, std_ddof):
        return rewards - np.median(rewards, axis=-1, keepdims=True)

    try:
        table = estimator_table(np.array([[1.0, 0.0, 0.5]]))
        assert set(table) == set(ADVANTAGE_ESTIMATORS) >= {"grpo", "drgrpo", "loo", "test-centre"}
        np.testing.assert_allclose(table["test-centre"], [[0.5, -0.5, 0.0]])
    finally:
        del ADVANTAGE_ESTIMATORS["test-centre"]
