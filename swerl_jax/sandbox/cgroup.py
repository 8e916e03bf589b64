"""A cgroup v2 per sandbox, where the host delegates one: the bound on a command's memory as a whole.

RLIMIT_AS bounds each process alone (15 processes hold 15 times it) and memfd, tmpfs and pipe pages count against
no process at all; a cgroup's `memory.max` counts every page the sandbox's processes charge, whatever holds them,
with swap off (`memory.swap.max` 0) and `pids.max` as a second process bound. It needs /sys/fs/cgroup to be a
cgroup2 mount that this process may write, with the memory and pids controllers enabled for our own cgroup's
children. Where that is missing (a cgroup v1 or hybrid host, a container without delegation) `memory_mode()` is
"seccomp": the sandbox refuses `memfd_create` and bounds open files instead, and SECURITY.md says what that leaves.
"""

from __future__ import annotations

import functools
import os
import pathlib
import time
import uuid

CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")


def _own_cgroup() -> pathlib.Path | None:
    """This process's cgroup v2 folder (the `0::` line of /proc/self/cgroup), or None."""
    try:
        lines = pathlib.Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return CGROUP_ROOT / line[3:].lstrip("/")
    return None


def _mount_type(path: pathlib.Path) -> str | None:
    """The file system type mounted at `path` (the last mount there wins), from /proc/self/mounts."""
    kind = None
    try:
        for line in pathlib.Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[1] == str(path):
                kind = fields[2]
    except OSError:
        return None
    return kind


@functools.cache
def _parent() -> pathlib.Path | None:
    """Where sandbox cgroups are made: our own cgroup when it is cgroup2, writable, and hands memory and pids to
    its children (enabled here if the kernel allows it), else None."""
    if _mount_type(CGROUP_ROOT) != "cgroup2":
        return None
    parent = _own_cgroup()
    if parent is None or not os.access(parent, os.W_OK):
        return None
    try:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        missing = {"memory", "pids"} - enabled
        if missing:  # fails (EBUSY) when our cgroup holds processes and is not the root: then not delegated
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(missing)))
    except OSError:
        return None
    return parent


def memory_mode() -> str:
    """"cgroup" when each sandbox gets its own cgroup v2 memory bound, else "seccomp" (memfd_create refused,
    open files bounded): the mode `Sandbox` runs in on this host."""
    return "cgroup" if _parent() is not None else "seccomp"


class SandboxCgroup:
    """One sandbox's cgroup: `memory.max` = memory_bytes, swap 0, `pids.max` = processes. `procs` is the file a
    process writes its pid to before it execs the sandbox; `close()` kills what is left and removes the cgroup."""

    def __init__(self, memory_bytes: int, processes: int) -> None:
        parent = _parent()
        if parent is None:
            raise RuntimeError("no delegated cgroup v2 on this host (memory_mode() is 'seccomp')")
        self.path = parent / f"swerl-sandbox-{uuid.uuid4().hex[:16]}"
        self.path.mkdir()
        try:
            (self.path / "memory.max").write_text(str(memory_bytes))
            (self.path / "memory.swap.max").write_text("0")
            (self.path / "pids.max").write_text(str(processes))
        except OSError:
            self.close()
            raise
        self.procs = self.path / "cgroup.procs"

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the sandbox at `memory.max`."""
        try:
            for line in (self.path / "memory.events").read_text().splitlines():
                name, _, count = line.partition(" ")
                if name == "oom_kill" and int(count) > 0:
                    return True
        except (OSError, ValueError):
            pass
        return False

    def close(self) -> None:
        """Kill every process left in the cgroup (`cgroup.kill`, Linux 5.14+) and remove it."""
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            pass
        for _ in range(1000):  # the kill is asynchronous: rmdir is EBUSY until the last process is reaped
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.001)
