"""Simulated runs: every reward, reason and advantage in them is the real reward's / estimator's output."""

import numpy as np
import pytest

from swerl_jax.analysis import load_run
from swerl_jax.analysis.advantages import step_groups
from swerl_jax.analysis.simulate import ensure_run, simulate_run
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.reward import calculate_search_replace_reward

REASONS = {"tag_count", "empty_thought", "no_blocks", "identical_search_replace", "search_not_found", "file_too_large"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    records = synthetic_records(6, seed=2)
    workdir = simulate_run(tmp_path_factory.mktemp("run"), num_steps=4, prompts_per_step=3, num_samples=6, seed=1,
                           records=records)
    return load_run(workdir), {r["instance_id"]: r for r in records}


def test_layout_and_counts(sim):
    run, _ = sim
    assert run.steps == [1, 2, 3, 4] and len(run.rollouts) == 4 * 3 * 6
    assert [m["step"] for m in run.metrics] == [1, 2, 3, 4]
    assert all(r["completion_len"] == len(r["completion"]) for r in run.rollouts)


def test_rewards_and_reasons_are_the_reward_functions(sim):
    run, records = sim
    for row in run.rollouts:
        rec = records[row["prompt_id"]]
        reward, info = calculate_search_replace_reward(rec["code_context"], rec["oracle_new_content"],
                                                       row["completion"])
        assert row["reward"] == reward
        assert row["format_error"] == (info["reason"] if reward < 0 else None)
        if row["format_error"] is not None:
            assert row["format_error"] in REASONS
        if row["truncated"]:
            assert "</solution>" not in row["completion"]


def hand_grpo(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """GRPO advantages written out in float64 loops (independent of swerl_jax): (r - mean) / (std + eps), 0 for
    a group whose rewards are all equal."""
    out = np.zeros(rewards.shape)
    for p, row in enumerate(np.asarray(rewards, np.float64)):
        n = len(row)
        mean = sum(row) / n
        std = (sum((x - mean) ** 2 for x in row) / n) ** 0.5
        if max(row) != min(row):
            out[p] = [(x - mean) / (std + eps) for x in row]
    return out


def test_advantages_and_metrics_consistent(sim):
    run, _ = sim
    for groups, metrics in zip(step_groups(run.rollouts), run.metrics, strict=True):
        np.testing.assert_allclose(groups.logged_advantages, hand_grpo(groups.rewards), atol=1e-6)
        rewards = groups.rewards.ravel()
        assert metrics["reward/mean"] == pytest.approx(rewards.mean(), abs=1e-12)
        assert metrics["reward/std"] == pytest.approx(rewards.std(), abs=1e-12)
        assert metrics["format_error_rate"] == pytest.approx(np.mean(rewards < 0))
        spread = groups.rewards.max(axis=1) - groups.rewards.min(axis=1)
        assert metrics["zero_var_group_frac"] == pytest.approx(np.mean(spread == 0))
        assert "kl" not in metrics  # no model, so no KL is invented


def test_simulate_is_deterministic(tmp_path):
    a = simulate_run(tmp_path / "a", num_steps=2, prompts_per_step=2, num_samples=3, seed=7)
    b = simulate_run(tmp_path / "b", num_steps=2, prompts_per_step=2, num_samples=3, seed=7)
    assert load_run(a).rollouts == load_run(b).rollouts
    with pytest.raises(ValueError, match="num_samples >= 2"):
        simulate_run(tmp_path / "c", num_samples=1)


def test_ensure_run(tmp_path):
    assert ensure_run(str(tmp_path)) == (tmp_path, "given")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ensure_run(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="mode='fast'"):
        ensure_run("", mode="fast")
    path, how = ensure_run("", mode="simulate", num_steps=2, root=tmp_path)
    assert how == "simulated" and path.parent == tmp_path and load_run(path).steps == [1, 2]


def test_simulating_into_a_real_run_is_refused_and_the_run_is_kept(tmp_path):
    """Day-three check: simulate_run("workdirs/demo") cut the real run's 30 metrics rows and rollout files to the
    simulation's 3, without a word."""
    run = simulate_run(tmp_path / "run", num_steps=2, prompts_per_step=2, num_samples=2, seed=1)
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    with pytest.raises(FileExistsError, match=r"already holds a run \(metrics.jsonl, rollouts\)"):
        simulate_run(run, num_steps=3, seed=2)
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before
