"""A training run as a child process that stops cleanly: its own process group, SIGINT first, then SIGKILL.

`subprocess.run` SIGKILLs a child 0.25 s after a Ctrl-C, mid checkpoint write, and leaves what it started (a
sampler server, reward workers) behind; `run_child` asks the run to stop (the trainer closes its sampler, workers
and checkpoint writes on SIGINT) and then clears its whole group. Used by `swerl_jax.sweep` for each run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

# How long a stopped run may take to exit after its SIGINT (a checkpoint write in flight) before it is killed, and
# how long it may take before the sweep says it is waiting (a trainer stops after its current step: seconds).
STOP_GRACE_S, STOP_QUIET_S = 60.0, 10.0


def run_child(cmd: list[str], cwd: str | os.PathLike | None = None, stdout: Any = None, stderr: Any = None,
              check: bool = False, grace_s: float = STOP_GRACE_S) -> subprocess.CompletedProcess:
    """`subprocess.run` for one training run, in a process group of its own so that the sweep decides how it
    stops: on Ctrl-C (KeyboardInterrupt) or any other exception while it runs, `stop_process_group`, then the
    exception goes on. (subprocess.run would SIGKILL it 0.25 s after the Ctrl-C, mid checkpoint write, and leave
    its sampler server or reward workers behind.)"""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        code = proc.wait()
    except BaseException:
        stop_process_group(proc, grace_s)
        raise
    if check and code:
        raise subprocess.CalledProcessError(code, cmd)
    return subprocess.CompletedProcess(cmd, code)


def stop_process_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop `proc` and everything in its process group: SIGINT (`python -m swerl_jax.train` then closes its
    sampler, reward workers and checkpoint writes and exits), SIGKILL after `grace_s` or at a second Ctrl-C, then
    SIGKILL to whatever the group still holds (a child the run left behind)."""
    signal_group(proc.pid, signal.SIGINT)
    try:
        try:
            proc.wait(timeout=min(STOP_QUIET_S, grace_s))
        except subprocess.TimeoutExpired:  # say why the prompt does not come back yet
            print(f"sweep: waiting up to {grace_s:.0f} s for the run in progress (pid {proc.pid}) to stop; Ctrl-C "
                  "again to kill it now", file=sys.stderr, flush=True)
            try:
                proc.wait(timeout=max(0.0, grace_s - STOP_QUIET_S))
            except subprocess.TimeoutExpired:
                pass
    except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
        pass
    finally:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to the process group `pgid`; nothing when it is gone already."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass
