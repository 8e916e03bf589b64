"""`swerl_jax.train`: bad flags are named; SFT -> GRPO hand-off (GRPO starts from the SFT stage's final params);
a re-run does not repeat a finished SFT stage. SFTTrainer.run and GRPOTrainer.run (built by `rl.build`) in this
process (inline sampler, the 7M demo model, 2 SFT steps, 1-2 GRPO steps)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from swerl_jax import train
from swerl_jax.rl import trainer as rl_trainer
from swerl_jax.rl.build import build_grpo_trainer
from swerl_jax.runs.metrics import read_metrics
from tests.rl.test_trainer_inprocess import tiny_config

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flag,message", [
    ("--config.rl.nope=1", "nope"),
    ("--workdirr=/tmp/x", "Unknown command line flag 'workdirr'"),
    ("--config.rl.num_steps=many", "many"),
])
def test_bad_flag_is_named_and_nothing_runs(tmp_path, flag, message):
    out = subprocess.run([sys.executable, "-m", "swerl_jax.train", "--config=experiments/tiny_cpu.py",
                          f"--workdir={tmp_path / 'run'}", flag], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)})
    assert out.returncode != 0
    assert message in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "run").exists()  # rejected before any work


def test_a_workdir_that_is_a_file_is_one_line(tmp_path):
    """New-user check: a FileExistsError / NotADirectoryError traceback came out of the run's first mkdir."""
    (tmp_path / "afile").write_text("")
    out = subprocess.run([sys.executable, "-m", "swerl_jax.train", "--config=experiments/tiny_cpu.py",
                          f"--workdir={tmp_path / 'afile' / 'run'}"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)})
    assert out.returncode != 0 and out.stderr.strip().splitlines() == [
        f"swerl_jax.train: --workdir {tmp_path / 'afile' / 'run'}: {tmp_path / 'afile'} is a file, not a folder"]


def _config(rl_steps: int):
    c = tiny_config(num_steps=rl_steps)
    c.sft.update(num_steps=2, batch_size=8, max_len=448, learning_rate=1e-3)
    c.data.synthetic_num_records = 8
    return c


@pytest.fixture(scope="module")
def handoff(tmp_path_factory, request):
    """run_experiment twice into one workdir (GRPO 1 step, then 2), recording what each GRPOTrainer starts from."""
    workdir = tmp_path_factory.mktemp("run")
    seen = []
    original = rl_trainer.GRPOTrainer.__init__

    def spy(self, config, wd, collector, evaluator=None, initial_params=None):
        original(self, config, wd, collector, evaluator, initial_params=initial_params)
        seen.append((None if initial_params is None else jax.device_get(initial_params),
                     jax.device_get(self.policy.state.params)))

    mp = pytest.MonkeyPatch()
    request.addfinalizer(mp.undo)
    mp.setattr(rl_trainer.GRPOTrainer, "__init__", spy)
    first = train.run_experiment(_config(1), workdir)
    sft_rows = (workdir / "sft" / "metrics.jsonl").read_text()
    # a longer GRPO stage is a config change: accepted explicitly (rundir refuses a silent one)
    second = train.run_experiment(_config(2), workdir, allow_config_change=True)
    return workdir, first, second, sft_rows, seen


@pytest.mark.slow  # two SFT + GRPO runs: ~2 min on the shared 2-core machine
def test_grpo_starts_from_the_sft_stage_final_params(handoff):
    workdir, first, _, _, seen = handoff
    assert [r["step"] for r in read_metrics(workdir / "sft" / "metrics.jsonl")] == [1, 2]
    assert first["sft"]["steps"] == 2 and first["rl"]["resumed_from"] == 0
    given, placed = seen[0]
    assert "2" in os.listdir(first["sft"]["checkpoints"])  # its final step is checkpointed
    # GRPO's starting policy is exactly the params the SFT stage handed over
    for a, b in zip(jax.tree.leaves(given), jax.tree.leaves(placed)):
        np.testing.assert_array_equal(a, b)
    # and it is not a fresh init: SFT moved the params away from the seeded random ones
    from swerl_jax.policy import Policy

    fresh = jax.device_get(Policy.create(_config(1), 1).state.params)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(fresh), jax.tree.leaves(placed)))


@pytest.mark.slow
def test_rerun_does_not_repeat_a_finished_sft_stage(handoff):
    workdir, _, second, sft_rows, seen = handoff
    assert (workdir / "sft" / "metrics.jsonl").read_text() == sft_rows  # no SFT step ran again
    assert second["rl"]["resumed_from"] == 1  # GRPO continued from its own checkpoint
    assert [r["step"] for r in read_metrics(workdir / "metrics.jsonl")] == [1, 2]
    # the second GRPO trainer was handed the SFT params restored from its final checkpoint (not retrained): the
    # same as the live ones the first time
    for a, b in zip(jax.tree.leaves(seen[0][0]), jax.tree.leaves(seen[1][0])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_finished_run_trains_nothing_even_without_its_sft_stage(handoff, tmp_path):
    """A GRPO-finished run whose sft/ was deleted (to save disk) said "nothing to train", then trained SFT again."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(handoff[0], run)
    shutil.rmtree(run / "sft")
    summary = train.run_experiment(_config(2), run)
    assert summary["already_finished"] == {"grpo": 2} and "sft" not in summary
    assert summary["rl"]["resumed_from"] == 2 and not (run / "sft").exists()  # GRPO restored, trained nothing
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2]


def test_sft_baseline_evaluated_like_the_rl_policy(tmp_path):
    """eval.every_steps > 0 and an SFT-only run (the RL-vs-SFT baseline): the SFT policy's held-out repair metric
    is written to sft/eval.json, and it is the very metric the GRPO trainer logs for the same params."""
    from swerl_jax.rl.heldout import evaluate_params

    c = _config(0)
    c.eval.update(every_steps=1, num_records=3)
    summary = train.run_experiment(c, tmp_path)
    row = summary["sft"]["eval"]
    assert row["step"] == 2 and row["eval/answers"] == 3
    assert 0.0 <= row["eval/exact_rate"] <= row["eval/format_rate"] <= 1.0 and 0.0 <= row["eval/score"] <= 100.0
    assert (tmp_path / "sft" / "eval.json").is_file()
    answers = [json.loads(x) for x in (tmp_path / "sft" / "eval_rows.jsonl").read_text().splitlines()]
    assert len(answers) == 3 and sum(a["reward"] for a in answers) / 3 == pytest.approx(row["eval/mean_reward"])
    grpo = build_grpo_trainer(c, tmp_path / "grpo")  # a seeded init: any params will do for the comparison
    try:
        grpo.before_steps(0)
        assert evaluate_params(train.resolve_config(c), grpo.policy.host_params()) == grpo.evaluate(0)
    finally:
        grpo.close()


def test_start_warnings_are_said_once_before_anything_runs(tmp_path, monkeypatch, caplog):
    """Issue 46 items 5 and 13: an idle sampler fleet and rl.off_policy='decoupled' are named once at start, in
    the run's log, before any stage is built."""
    c = _config(1)
    c.sft.num_steps = 0
    c.sampler.update(mode="process", num_processes=2, prompts_per_request=0)  # 2 prompts x 8 samples: 1 batch
    c.rl.off_policy = "decoupled"

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(train, "build_grpo_trainer", stop)
    with caplog.at_level("WARNING", logger="swerl_jax.train"), pytest.raises(Stop):
        train.run_experiment(c, tmp_path)
    said = [r.getMessage() for r in caplog.records if r.name == "swerl_jax.train"]
    assert sum("sampler.num_processes=2: " in m and "never serve a request" in m for m in said) == 1, said
    assert sum(m.startswith("rl.off_policy='decoupled' with one update per batch") for m in said) == 1, said


def test_prompts_that_do_not_split_over_the_processes_are_one_line_on_every_process(tmp_path, monkeypatch):
    """Issue 57's held-out check: on 3 processes, prompts_per_step=4 failed early but each process printed a
    15-line traceback (`sharding.fail_alone` prints one for any exception that is not the program's own SystemExit),
    so a config error read as a bug. It is a SystemExit with one line naming the key, as on one process."""
    c = _config(1)
    c.rl.prompts_per_step = 4
    monkeypatch.setattr(train.sharding, "initialize_distributed", lambda config: None)
    monkeypatch.setattr(jax, "process_count", lambda: 3)
    with pytest.raises(SystemExit) as exit_info:
        train.run_experiment(c, tmp_path / "run")
    line = str(exit_info.value.code)
    assert line.startswith("swerl_jax.train: ") and "prompts_per_step" in line and "\n" not in line, line
    assert not (tmp_path / "run").exists()
