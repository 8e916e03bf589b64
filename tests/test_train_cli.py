"""`python -m swerl_jax.train` as a researcher meets it: one-line config errors, a changed config refused on
resume, a finished run that says so, quiet library logs and a closing summary."""

import json
import os
import subprocess
import sys

from .conftest import REPO_ROOT

SFT_ONLY = ["--config=experiments/tiny_cpu.py", "--config.sft.num_steps=2", "--config.rl.num_steps=0",
            "--config.sft.batch_size=2"]


def _train(*args, timeout=600):
    # one CPU device, as a researcher's shell has (the suite's 8 fake devices would not divide batch 2)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run([sys.executable, "-m", "swerl_jax.train", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_cli_errors_are_one_line():
    for args, expected in (
            (["--config.rl.num_step=2"], "unknown config key 'rl.num_step'; did you mean rl.num_steps?"),
            (["--config.rl.num_steps=abc"], "flag --config.rl.num_steps=abc: invalid literal for int()")):
        proc = _train("--config=experiments/tiny_cpu.py", *args, timeout=120)
        assert proc.returncode != 0
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr  # one line, no traceback
        assert expected in proc.stderr


def test_resume_refuses_a_changed_config_and_a_finished_run_says_so(tmp_path):
    workdir = f"--workdir={tmp_path / 'run'}"
    first = _train(*SFT_ONLY, workdir)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "orbax" not in first.stderr.lower(), first.stderr[-3000:]  # library INFO logs are off by default
    assert "sft: 100%" in first.stderr  # the progress bar names its stage
    assert "SFT   2 steps (to step 2)  loss " in first.stderr  # the closing summary (stdout: the JSON summary)
    assert json.loads(first.stdout)["sft"]["steps"] == 2
    again = _train(*SFT_ONLY, workdir)
    assert again.returncode == 0 and "already finished" in again.stderr
    changed = _train(*SFT_ONLY, "--config.sft.learning_rate=0.1", workdir)
    assert changed.returncode == 1
    assert "sft.learning_rate: 0.002 -> 0.1" in changed.stderr and "Traceback" not in changed.stderr
    accepted = _train(*SFT_ONLY, "--config.sft.learning_rate=0.1", "--allow_config_change", workdir)
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert "sft.learning_rate" in (tmp_path / "run" / "config_changes.jsonl").read_text()
