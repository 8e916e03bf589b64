"""The GRPO trainer end to end, as `python -m swerl_jax.train` runs it: a SIGKILL mid-run and a resume give the
metrics and rollouts of an uninterrupted run."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from swerl_jax.runs.metrics import read_metrics

REPO = pathlib.Path(__file__).resolve().parents[2]
SMALL = ["--config=experiments/tiny_cpu.py", "--config.sft.num_steps=0", "--config.rl.num_steps=6",
         "--config.rl.prompts_per_step=2", "--config.rl.num_samples=4", "--config.sampler.max_new_tokens=24",
         "--config.sampler.prompts_per_request=1", "--config.checkpoint.every_steps=2",
         "--config.reward.kind=python:tests.rl.reward_hooks.gated_vowel_reward",
         "--config.reward.timeout_s=600", "--config.optim.learning_rate=3e-3",
         "--config.rl.update_epochs=2", "--config.logging.progress_bar=False"]


def _env(**extra: str) -> dict:
    return {**os.environ, **extra, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
            "PYTHONPATH": str(REPO), "JAX_COMPILATION_CACHE_DIR": os.environ.get(
                "SWERL_JAX_CACHE", str(pathlib.Path.home() / ".cache" / "swerl_jax" / "jax"))}


def _train(workdir: pathlib.Path, flags: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "swerl_jax.train", f"--workdir={workdir}", *flags]
    out = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _rollouts(workdir: pathlib.Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((workdir / "rollouts").glob("*.jsonl"))}


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_uninterrupted_run(tmp_path):
    full, killed, gate = tmp_path / "full", tmp_path / "killed", tmp_path / "gate"
    gate.mkdir()
    # The uninterrupted run and the run to kill go side by side (one core each on CI's two).
    out_file, err_file = tmp_path / "full.stdout", tmp_path / "full.stderr"  # files: a full pipe would block it
    with open(out_file, "w") as out, open(err_file, "w") as err:
        uninterrupted = subprocess.Popen([sys.executable, "-m", "swerl_jax.train", f"--workdir={full}", *SMALL],
                                         cwd=REPO, env=_env(), stdout=out, stderr=err)
    # The reward hook blocks the first reward of step 5 (after 4 steps x 2 prompts x 4 samples): the run cannot
    # get past it, so the kill lands inside step 5 whatever the machine's load; wait on that event, not a clock.
    env = _env(SWERL_TEST_GATE=str(gate), SWERL_TEST_GATE_AFTER=str(4 * 2 * 4))
    cmd = [sys.executable, "-m", "swerl_jax.train", f"--workdir={killed}", *SMALL]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600  # hang guard only
    try:
        while not ((gate / "blocked").exists() and (killed / "checkpoints" / "4").is_dir()):
            assert proc.poll() is None, "training ended before it could be killed"
            assert time.monotonic() < deadline, "the run never reached step 5's rewards"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        uninterrupted.wait(timeout=600)
    assert proc.returncode == -signal.SIGKILL
    assert uninterrupted.returncode == 0, err_file.read_text()[-4000:]
    stdout = out_file.read_text()
    summary = json.loads(stdout[stdout.index("{"):])
    assert summary["rl"]["resumed_from"] == 0
    expected = read_metrics(full / "metrics.jsonl")
    assert [r["step"] for r in expected] == [1, 2, 3, 4, 5, 6]
    assert len({r["reward_mean"] for r in expected}) > 1 and all(r["grad_norm"] > 0 for r in expected)
    # rl.update_epochs=2: the second update on the same batch sees a ratio away from 1
    assert all(r["ratio_max"] < 1 + 1e-3 for r in expected)
    assert any(abs(r["last_epoch/ratio_mean"] - 1) > 1e-4 for r in expected)

    # the kill came inside step 5: steps 1-4 logged and checkpointed, nothing of step 5 written
    assert [r["step"] for r in read_metrics(killed / "metrics.jsonl")] == [1, 2, 3, 4]
    assert sorted(p.name for p in (killed / "checkpoints").iterdir() if p.name.isdigit()) == ["2", "4"]
    assert sorted(p.name for p in (killed / "rollouts").glob("*.jsonl")) == sorted(_rollouts(full))[:4]

    out = _train(killed, SMALL)
    summary = json.loads(out.stdout[out.stdout.index("{"):])
    assert summary["rl"]["resumed_from"] == 4
    assert _comparable(read_metrics(killed / "metrics.jsonl")) == _comparable(expected)
    assert _rollouts(killed) == _rollouts(full)
    # the sampler started by the killed trainer exited with it (no orphan holding a port)
    log = (killed / "sampler" / "process_0" / "sampler.log").read_text()
    assert log.count("sampler listening") == 2 and "parent process" in log

