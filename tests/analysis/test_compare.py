"""Comparing runs: names, overlaid curves, one summary row per run; a run's config and its steps."""

import json

import pytest

from swerl_jax.analysis import load_run
from swerl_jax.analysis.compare import CONFIG_COLUMNS, compare_table, load_runs, overlay
from swerl_jax.analysis.rewards import to_markdown
from swerl_jax.runs.metrics import MetricsWriter


def _run(workdir, rewards, advantage="grpo"):
    with MetricsWriter(workdir, tensorboard=False, progress=False) as w:
        for step, r in enumerate(rewards, 1):
            w.write(step, {"reward_mean": r, "format_error_rate": 1 - step / 10, "time": {"step_s": 2.0}})
            w.write_rollouts(step, [{"prompt_id": "p", "group": 0, "sample": 0, "completion": "c", "reward": r,
                                     "advantage": 0.0}])
    (workdir / "config.json").write_text(json.dumps({"rl": {"advantage": advantage, "kl_coef": 0.0}, "seed": 1}))
    return workdir


def test_two_runs_side_by_side(tmp_path):
    a = _run(tmp_path / "abl" / "grpo", [-1.0, 0.0, 0.5, 0.25])
    b = _run(tmp_path / "abl2" / "grpo", [0.1, 0.2, 0.3, 0.4], advantage="loo")
    runs = load_runs(f"{a}, {b}")
    assert list(runs) == ["abl/grpo", "abl2/grpo"]  # shortest tails that differ
    assert overlay(runs, "reward_mean") == {"abl/grpo": ([1, 2, 3, 4], [-1.0, 0.0, 0.5, 0.25]),
                                            "abl2/grpo": ([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])}
    assert overlay(runs, "kl") == {}
    rows = compare_table(runs, config_columns=("rl.advantage", "seed", "rl.missing"))
    assert rows[0] == {"run": "abl/grpo", "rl.advantage": "grpo", "seed": 1, "rl.missing": None, "steps": 4,
                       "reward first": -1.0, "reward last": 0.25, "reward best": 0.5, "malformed last": 0.6,
                       "exact last": None, "s/step": 2.0}
    assert rows[1]["rl.advantage"] == "loo" and rows[1]["reward best"] == 0.4
    with pytest.raises(ValueError, match="twice"):
        load_runs([a, a])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_runs([a, tmp_path / "nope"])


def test_the_table_shows_every_config_key_that_differs(tmp_path):
    """Issue 46 item 4: two runs that differ in rl.off_policy (not a default column) get a column for it, beside the
    default ones; keys that change nothing computed (logging.*) are left out, and a config value shows as it is."""
    a = _run(tmp_path / "plain", [0.0, 0.5])
    b = _run(tmp_path / "decoupled", [0.0, 0.25])
    for run, off_policy, bar in ((a, "plain", True), (b, "decoupled", False)):
        (run / "config.json").write_text(json.dumps({"rl": {"advantage": "grpo", "off_policy": off_policy},
                                                     "optim": {"learning_rate": 2e-4}, "seed": 0,
                                                     "logging": {"progress_bar": bar}}))
    rows = compare_table(load_runs([a, b]))
    assert [r["rl.off_policy"] for r in rows] == ["plain", "decoupled"]
    assert "logging.progress_bar" not in rows[0] and rows[0]["optim.learning_rate"] == 2e-4
    assert list(rows[0])[:len(CONFIG_COLUMNS) + 2] == ["run", *CONFIG_COLUMNS, "rl.off_policy"]
    table = to_markdown(rows)
    assert "| rl.off_policy |" in table.splitlines()[0]
    assert "| None | 0.0002 | 0 | plain |" in table and "| None | 0.0002 | 0 | decoupled |" in table  # lr, seed


def test_config_and_step_lookup(tmp_path):
    run = load_run(_run(tmp_path / "r", [0.0, 1.0, 0.5]))
    assert run.config["rl"]["advantage"] == "grpo"
    assert run.resolve_step(-1) == 3 and run.resolve_step(2) == 2
    with pytest.raises(ValueError, match=r"step=9 has no rollouts in .*; steps with rollouts: \[1, 2, 3\]"):
        run.resolve_step(9)
    (tmp_path / "r" / "config.json").unlink()
    assert load_run(tmp_path / "r").config is None
