"""The launchers: failure propagation of multiprocess_cpu.sh, and the commands tpu_pod.sh / slurm_h100.sbatch
issue (gcloud / srun replaced by recorders on PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["local.sh", "multiprocess_cpu.sh", "tpu_pod.sh", "slurm_h100.sbatch"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse_and_are_executable(script):
    path = REPO / "launch" / script
    assert os.access(path, os.X_OK)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_multiprocess_env_and_failure_propagation(tmp_path):
    # Process 1 fails, but only after processes 0 and 2 have printed (their logs are non-empty): the launcher
    # stops the others as soon as one fails, so an early exit would race with their start-up on a busy machine.
    code = ("import os, sys, time; e = os.environ; print(e['JAX_PROCESS_ID'], e['JAX_NUM_PROCESSES'], "
            "e['JAX_COORDINATOR_ADDRESS'].split(':')[0], e['XLA_FLAGS'].split()[0], flush=True)\n"
            "if e['JAX_PROCESS_ID'] == '1':\n"
            "    logs = [os.path.join(e['LOG_DIR'], f'process_{i}.log') for i in (0, 2)]\n"
            "    end = time.time() + 50\n"
            "    while time.time() < end and not all(os.path.getsize(p) for p in logs): time.sleep(0.05)\n"
            "    sys.exit(3)\n"
            "time.sleep(0 if e['JAX_PROCESS_ID'] == '0' else 60)\n")
    out = subprocess.run(["bash", "launch/multiprocess_cpu.sh", "3", "2", sys.executable, "-c", code], cwd=REPO,
                         capture_output=True, text=True, timeout=90, env={**os.environ, "LOG_DIR": str(tmp_path)})
    assert out.returncode == 3  # process 1's status, not that of process 2, which the launcher stopped
    assert "process 1 failed (exit 3)" in out.stderr
    assert "[0] 0 3 127.0.0.1 --xla_force_host_platform_device_count=2" in out.stdout
    assert "[2] 2 3 127.0.0.1" in out.stdout


def _recorder(bin_dir: Path, name: str, log: Path) -> None:
    path = bin_dir / name
    path.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >> {log}\n')
    path.chmod(0o755)


def _fake_python(bin_dir: Path, log: Path) -> str:
    """A stand-in for .venv/bin/python that records its arguments (the launchers only exec it)."""
    path = bin_dir / "python"
    path.write_text(f'#!/usr/bin/env bash\necho "python $*" >> {log}\n')
    path.chmod(0o755)
    return str(path)


def test_tpu_pod_runs_the_trainer_on_every_worker(tmp_path):
    log = tmp_path / "calls.log"
    _recorder(tmp_path, "gcloud", log)
    py = _fake_python(tmp_path, log)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "TPU_NAME": "pod", "ZONE": "z1", "PY": py}
    subprocess.run(["bash", "launch/tpu_pod.sh", "experiments/swerl_llama3_70b.py", "--config.mesh.name=tpu-v5p-512"],
                   cwd=REPO, env=env, check=True, timeout=60, capture_output=True)
    calls = log.read_text()
    assert calls.startswith("python launch/plan.py --config=experiments/swerl_llama3_70b.py "
                            "--config.mesh.name=tpu-v5p-512\n")
    assert "gcloud compute tpus tpu-vm ssh pod --zone=z1 --worker=all --command=" in calls
    assert ("SWERL_DISTRIBUTED=auto .venv/bin/python -m swerl_jax.train --config=experiments/swerl_llama3_70b.py "
            "--config.mesh.name=tpu-v5p-512") in calls


def test_slurm_plans_then_sruns_one_process_per_node(tmp_path):
    log = tmp_path / "calls.log"
    _recorder(tmp_path, "srun", log)
    py = _fake_python(tmp_path, log)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PY": py, "SLURM_SUBMIT_DIR": str(REPO)}
    subprocess.run(["bash", "launch/slurm_h100.sbatch"], cwd=REPO, env=env, check=True, timeout=60,
                   capture_output=True)
    calls = log.read_text().splitlines()
    assert calls[0] == "python launch/plan.py --config=experiments/swerl_llama3_70b.py"
    assert calls[1] == f"srun --kill-on-bad-exit=1 {py} -m swerl_jax.train --config=experiments/swerl_llama3_70b.py"
    text = (REPO / "launch" / "slurm_h100.sbatch").read_text()
    assert "#SBATCH --nodes=64" in text and "#SBATCH --ntasks-per-node=1" in text
    assert "JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7" in text
