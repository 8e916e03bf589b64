"""The host's disk poll against what a command holds open (issue 30's hard bounds). The poll reads every fd's target
in /proc to find deleted files a command still holds; a file opened in a folder nested past PATH_MAX (30 folders of
200 characters) made that readlink raise ENAMETOOLONG. The exception left `Sandbox.run` without killing the sandbox:
the step came back as "OSError: File name too long: /proc/PID/fd/3" (the tool error the model saw), while the
command ran on, unsupervised: past the step timeout and with no disk quota (found as a flaky failure of
test_episode.py's deep-tree test, which holds such a file while a poll runs)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import signal
import sys
import time

import pytest

from swerl_jax.sandbox import bwrap
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install-dev)")
QUOTA = 16 << 20
LIMITS = SandboxLimits(memory_bytes=256 << 20, cpu_seconds=60, processes=64, timeout_s=60, file_bytes=64 << 20,
                       disk_bytes=QUOTA, tmp_bytes=16 << 20, shm_bytes=8 << 20, output_bytes=1 << 20)
# folders nested past PATH_MAX (4096): /proc/PID/fd/N's target can no longer be read as a path
DEEP = "d=$(printf 'n%.0s' $(seq 200)); for i in $(seq 30); do mkdir $d && cd $d || exit 9; done; "


def _running(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (the ones this test started)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def _gone(marker: str, within_s: float = 10.0) -> bool:
    """Whether every process holding `marker` is gone (a killed PID namespace takes a moment to be reaped)."""
    deadline = time.monotonic() + within_s
    while _running(marker):
        if time.monotonic() > deadline:
            for pid in _running(marker):  # leave nothing of ours behind
                os.kill(pid, signal.SIGKILL)
            return False
        time.sleep(0.05)
    return True


def test_a_deleted_file_held_past_path_max_still_counts_against_the_quota(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    marker = "987.654321"
    command = DEEP + f"exec 3>held; rm held; head -c 20M /dev/zero >&3; echo written; exec sleep {marker}"
    result = Sandbox(readable=[sys.base_prefix], limits=LIMITS).run(command, work)
    assert result.limit == "disk" and "written" in result.output, result
    assert _gone(marker)


def test_a_failing_poll_never_leaves_the_sandbox_running(tmp_path, monkeypatch):
    """Whatever the host's poll raises, the command is killed before the error leaves `run`."""
    work = tmp_path / "work"
    work.mkdir()
    marker = "876.543219"

    def broken(*args, **kwargs):
        if not (work / "started").exists():
            return False
        raise RuntimeError("the poll failed")

    monkeypatch.setattr(bwrap, "_over_quota", broken)
    limits = dataclasses.replace(LIMITS, timeout_s=120)
    with pytest.raises(RuntimeError, match="the poll failed"):
        Sandbox(readable=[sys.base_prefix], limits=limits).run(f"touch started; exec sleep {marker}", work)
    assert _gone(marker)
