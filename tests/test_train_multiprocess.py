"""`python -m swerl_jax.train` on two processes where one fails (issue 57 item 3): the failing process exits at once
with one line naming it and how to resume, and the launcher stops the other, which is waiting in a collective.
Before, the failing process waited at jax.distributed's shutdown barrier for the other one, itself waiting for the
failed one: both hung ~5 minutes until the barrier timed out and the run ended with status 134.

The worker half (`python -m tests.test_train_multiprocess ARGS`) is the real entry point (`absl.app.run(train.main)`,
flags, config resolution) with `run_experiment` replaced: process 1 raises the tracker's error, process 0 waits for
process 1 in a collective, as it did in the policy's Orbax write.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ERROR = "policy version 2 is not newer than the published version 3 in RUN/policy"


def worker() -> None:
    """`swerl_jax.train`'s main with a `run_experiment` that fails in process 1 and blocks process 0."""
    from absl import app

    from swerl_jax import sharding, train

    def run_experiment(config, workdir, allow_config_change=False):
        sharding.initialize_distributed(config)
        import jax
        from jax.experimental import multihost_utils

        if jax.process_index() == 1:
            raise ValueError(ERROR)
        multihost_utils.sync_global_devices("process 1 never comes")  # process 0 waits, as in a checkpoint write
        return {"workdir": str(workdir)}

    train.run_experiment = run_experiment
    train.quiet_logging()
    train._define_flags()
    app.run(train.main, flags_parser=train.parse_flags)


def test_a_failing_process_exits_at_once_and_the_launcher_stops_the_other(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["LOG_DIR"] = str(tmp_path / "logs")
    # the timeout only ends a hung run (it used to take ~300 s, jax.distributed's shutdown timeout)
    proc = subprocess.run(["bash", "launch/multiprocess_cpu.sh", "2", "1", sys.executable, "-m",
                           "tests.test_train_multiprocess", "--config=experiments/tiny_cpu.py",
                           f"--workdir={tmp_path / 'run'}"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=150)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]  # process 1's status, not process 0's (stopped by the launcher)
    assert "process 1 failed (exit 1)" in proc.stderr  # the launcher's line
    line = (f"swerl_jax.train: process 1 of 2 failed: ValueError: {ERROR}; it exits now without waiting for the "
            "other processes (its launcher stops them); run the same command to resume from the newest checkpoint")
    assert f"[1] {line}" in proc.stdout.splitlines(), out[-4000:]
    assert "Traceback" in proc.stdout  # the why stays in the log, above the line
    # process 0 was ended by the launcher's SIGTERM while it waited, not by its collective's own timeout 30 s later
    # (JAX's preemption service used to catch that SIGTERM and keep the process waiting)
    assert "process 0 of 2 failed" not in proc.stdout, out[-4000:]


if __name__ == "__main__":
    worker()
