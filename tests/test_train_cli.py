"""`python -m swerl_jax.train` as a researcher meets it: one-line config errors, a changed config refused on
resume, a finished run that says so, quiet library logs and a closing summary."""

import json
import os
import subprocess
import sys

from .conftest import REPO_ROOT
from .test_weights_check import missing_shard_checkpoint

SFT_ONLY = ["--config=experiments/tiny_cpu.py", "--config.sft.num_steps=2", "--config.rl.num_steps=0",
            "--config.sft.batch_size=2"]


def _train(*args, timeout=600, cwd=REPO_ROOT):
    # one CPU device, as a researcher's shell has (the suite's 8 fake devices would not divide batch 2)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run([sys.executable, "-m", "swerl_jax.train", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_cli_errors_are_one_line():
    for args, expected in (
            (["--config.rl.num_step=2"], "unknown config key 'rl.num_step'; did you mean rl.num_steps?"),
            (["--config.rl.num_steps=abc"], "flag --config.rl.num_steps=abc: invalid literal for int()"),
            # issue 46 item 15: the message's own closing quote was stripped with KeyError's quotes
            (["--config.rl.old_logprobs=recompute", "--config.rl.max_staleness=1"],
             "set rl.old_logprobs='sampler'\n"),
            # issue 57 item 6: 1 prompt a step on 2 processes failed only when GRPO started, after SFT
            (["--config.mesh.num_processes=2", "--config.rl.prompts_per_step=1"],
             "rl.prompts_per_step=1 does not split over the 2 processes of this run (mesh.num_processes=2)")):
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
    trained = (tmp_path / "run" / "sft" / "metrics.jsonl").read_text()
    again = _train(*SFT_ONLY, workdir)
    assert again.returncode == 0 and "already finished" in again.stderr
    assert (tmp_path / "run" / "sft" / "metrics.jsonl").read_text() == trained  # nothing trained again
    changed = _train(*SFT_ONLY, "--config.sft.learning_rate=0.1", workdir)
    assert changed.returncode == 1
    assert "sft.learning_rate: 0.002 -> 0.1" in changed.stderr and "Traceback" not in changed.stderr
    accepted = _train(*SFT_ONLY, "--config.sft.learning_rate=0.1", "--allow_config_change", workdir)
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert "sft.learning_rate" in (tmp_path / "run" / "config_changes.jsonl").read_text()


def test_checkpoint_problems_are_one_line_before_the_workdir_is_made(tmp_path):
    """Issue 46 item 11: a model.hf_dir of another family or shape, a missing shard, a sliding-window config and a
    tokenizer with ids past the vocabulary each printed the right message as a 20-line traceback, after the
    workdir was created. Three through the command (every kind is one `weights_check.check_hf_checkpoint` before
    the workdir; tests/test_weights_check.py has them all)."""
    from swerl_jax.model.config import get_model_config
    from tests.model.hf_models import save_random_hf

    save_random_hf(get_model_config("tiny-qwen3"), tmp_path / "qwen3")
    gone = missing_shard_checkpoint(tmp_path / "sharded")
    for args, expected in (
            # from outside the clone, paths relative to the current directory (issue 46 item 9): the config file
            # is found as data paths are, model.hf_dir is the current directory's
            (["--config.model.hf_dir=qwen3"], f"{tmp_path / 'qwen3' / 'config.json'}: model_type='qwen3' is a "
             "qwen3 checkpoint, but model.name='demo-7m' is a llama model"),
            ([f"--config.model.hf_dir={tmp_path / 'sharded'}", "--config.model.name=hf"],
             f"lists shard {gone}, which is missing"),
            (["--config.model.name=tiny"], "has 49152 tokens (ids up to 49151), outside model.name='tiny''s "
             "vocabulary of 512")):
        workdir = tmp_path / "run"
        proc = _train(*SFT_ONLY, "--workdir=run", *args, timeout=300, cwd=tmp_path)
        assert proc.returncode != 0
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr[-3000:]  # one line
        assert expected in proc.stderr, proc.stderr[-3000:]
        assert not workdir.exists(), args  # nothing written
