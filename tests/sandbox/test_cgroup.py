"""The sandbox's cgroup plumbing, against a stand-in folder where the host delegates no cgroup v2 (CI, this
project's machines: cgroup v1 / hybrid): the limits are written, the command's first process joins before it
execs, and `memory_mode()` names the mode. The kernel's side (memory.max holding) is pinned in
tests/redteam/test_bounds.py wherever a cgroup is delegated."""

import pathlib
import shutil
import sys

import pytest

from swerl_jax.sandbox import cgroup
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install-dev)")


def test_memory_mode_is_one_of_the_two():
    assert cgroup.memory_mode() in ("cgroup", "seccomp")


def test_the_sandbox_joins_its_cgroup_with_its_limits(tmp_path, monkeypatch):
    parent = tmp_path / "parent"
    parent.mkdir()
    monkeypatch.setattr(cgroup, "_parent", lambda: parent)
    made: list[cgroup.SandboxCgroup] = []
    real = cgroup.SandboxCgroup

    def record(memory_bytes: int, processes: int) -> cgroup.SandboxCgroup:
        made.append(real(memory_bytes, processes))
        return made[-1]

    monkeypatch.setattr("swerl_jax.sandbox.bwrap.SandboxCgroup", record)
    monkeypatch.setattr(cgroup.time, "sleep", lambda _: None)  # a stand-in folder never empties: no wait
    work = tmp_path / "work"
    work.mkdir()
    sandbox = Sandbox(readable=[sys.base_prefix], limits=SandboxLimits(memory_bytes=300 << 20, processes=40,
                                                                       timeout_s=60))
    sandbox.memory_mode = "cgroup"
    result = sandbox.run("echo ran", work)
    assert result.returncode == 0 and "ran" in result.output, result.output
    group = pathlib.Path(made[0].path)
    assert (group / "memory.max").read_text() == str(300 << 20)
    assert (group / "memory.swap.max").read_text() == "0" and (group / "pids.max").read_text() == "40"
    assert int((group / "cgroup.procs").read_text()) > 0  # the first process wrote its pid before it exec'd
    assert (group / "cgroup.kill").read_text() == "1"  # what was left is killed at the end
