"""Run commands in a bubblewrap sandbox: no network, read-only outside the work dir, rlimits and a timeout.

The sandbox is what makes it safe to run model-written code: bubblewrap mounts the host read-only, gives the
command a private /tmp and an empty /root (so root's home and credentials are not even visible), unshares the
network, PID, IPC and UTS namespaces, and binds only the instance's work dir writable. When the harness runs as
root, the command also drops to a per-sandbox unprivileged uid (so RLIMIT_NPROC is enforced: the kernel exempts
root) and runs under RLIMIT_AS (memory), RLIMIT_CPU and RLIMIT_NPROC. The wall-clock timeout kills the whole
sandbox (bubblewrap's PID namespace dies with its init).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

# Unprivileged uids the sandboxes run as (one per concurrent sandbox, so the per-uid process limit is per sandbox).
_UID_BASE = 2_900_000
_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()
# Host folders the sandbox replaces with empty private tmpfs mounts; paths it needs there are bound back in.
_PRIVATE_MOUNTS = (pathlib.Path("/tmp"), pathlib.Path("/root"))


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces on this machine."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed command.

    memory_bytes caps the address space (RLIMIT_AS), cpu_seconds the CPU time (RLIMIT_CPU), processes the number
    of processes of the sandbox's uid (RLIMIT_NPROC, only when running as root), timeout_s the wall clock.
    """

    memory_bytes: int = 8 << 30
    cpu_seconds: int = 3600
    processes: int = 512
    timeout_s: float = 1800.0


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed command did: exit code (None on timeout), combined stdout+stderr, whether it timed out."""

    returncode: int | None
    output: str
    timed_out: bool
    wall_s: float


def bwrap_path() -> str:
    """The bubblewrap binary, or SandboxUnavailable saying how to install it."""
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: `apt-get install -y bubblewrap` (make install-dev does it)"
        )
    return path


@contextmanager
def _sandbox_uid() -> Iterator[int | None]:
    """A free unprivileged uid for one sandbox when running as root, else None (we keep our own uid)."""
    if os.geteuid() != 0:
        yield None
        return
    # Each process gets its own block of uids, so concurrent harness processes do not share process limits.
    base = _UID_BASE + (os.getpid() % 4096) * 256
    with _uid_lock:
        uid = next(u for u in range(base, base + 256) if u not in _uids_in_use)
        _uids_in_use.add(uid)
    try:
        yield uid
    finally:
        with _uid_lock:
            _uids_in_use.discard(uid)


def chown_tree(path: pathlib.Path, uid: int) -> None:
    """Give a work dir to the sandbox uid (without following symlinks, so nothing outside it changes owner)."""
    os.lchown(path, uid, uid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, uid)


class Sandbox:
    """Runs shell commands under bubblewrap with one writable work dir.

    readable: extra paths that must be visible inside even when they sit under /root (which the sandbox hides):
    interpreters, cached environments, the clones the work dir's git objects point to.
    """

    def __init__(self, readable: Sequence[str | os.PathLike] = (), limits: SandboxLimits = SandboxLimits()):
        self.bwrap = bwrap_path()
        self.readable = [pathlib.Path(p).resolve() for p in readable]
        self.limits = limits

    def _argv(self, workdir: pathlib.Path, command: str, network: bool, env: Mapping[str, str], uid: int | None):
        argv = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        # bwrap's /dev/shm is root's 0755: the sandbox uid needs it for multiprocessing's semaphores.
        argv += ["--perms", "01777", "--tmpfs", "/dev/shm"]
        for mount in _PRIVATE_MOUNTS:
            argv += ["--perms", "01777" if mount == pathlib.Path("/tmp") else "0755", "--tmpfs", str(mount)]
        made: set[pathlib.Path] = set()
        for path, how in [(p, "--ro-bind") for p in self.readable if p.exists()] + [(workdir, "--bind")]:
            hidden_under = next((m for m in _PRIVATE_MOUNTS if path.is_relative_to(m)), None)
            if hidden_under is not None:
                # bwrap would create the mount point's parents 0700; the sandbox uid must be able to traverse them.
                for parent in reversed(path.parents):
                    if parent.is_relative_to(hidden_under) and parent != hidden_under and parent not in made:
                        argv += ["--perms", "0755", "--dir", str(parent)]
                        made.add(parent)
            if how == "--bind" or hidden_under is not None:
                argv += [how, str(path), str(path)]
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--die-with-parent", "--new-session"]
        if not network:
            argv.append("--unshare-net")
        argv += ["--clearenv", "--chdir", str(workdir)]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv.append("--")
        if uid is not None:
            argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        return argv + ["bash", "-c", command]

    def run(
        self,
        command: str,
        workdir: str | os.PathLike,
        *,
        network: bool = False,
        env: Mapping[str, str] | None = None,
        limits: SandboxLimits | None = None,
    ) -> SandboxResult:
        """Run `command` (bash) in the sandbox with cwd = workdir, the only writable host path.

        The work dir is handed to the sandbox uid first (when running as root). env replaces the environment
        (HOME defaults to the work dir, PATH to the system one). network=True is for installs from a package
        index before any model-written code is in the work dir.
        """
        workdir = pathlib.Path(workdir).resolve()
        if not workdir.is_dir():
            raise FileNotFoundError(f"sandbox work dir {workdir} does not exist")
        limits = limits or self.limits
        full_env = {"HOME": str(workdir), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        full_env.update(env or {})
        with _sandbox_uid() as uid:
            if uid is not None:
                chown_tree(workdir, uid)

            # The limits are set by prlimit(1) in front of bwrap, inherited by everything in the sandbox. Not a
            # preexec_fn: that runs Python between fork and exec, which can deadlock in a multithreaded parent
            # (the trainer's JAX threads), and it keeps CPython from using vfork.
            limit = ["prlimit", f"--as={limits.memory_bytes}", f"--cpu={limits.cpu_seconds}",
                     f"--nproc={limits.processes}", "--"]
            start = time.monotonic()
            proc = subprocess.Popen(
                limit + self._argv(workdir, command, network, full_env, uid),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                out, _ = proc.communicate(timeout=limits.timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # bwrap is the group leader; its PID namespace dies with it
                out, _ = proc.communicate()
                timed_out = True
        text = out.decode("utf-8", errors="replace")
        if not timed_out and proc.returncode != 0 and text.startswith("bwrap:"):
            raise SandboxUnavailable(f"bubblewrap failed to start: {text.strip()}")
        return SandboxResult(None if timed_out else proc.returncode, text, timed_out, time.monotonic() - start)
