"""Run commands in a bubblewrap sandbox: a minimal view of the host, no network, bounded resources.

The sandbox is what makes it safe to run model-written code (SECURITY.md has the threat model and the limits).
The command sees only what it needs: the system's programs and libraries (/usr, /etc, the /bin and /lib links),
the paths it is given as `readable` (an interpreter, a cached environment) read-only, its own work dir
writable, the caller's `inputs` read-only at /run/swerl, and fresh size-limited tmpfs mounts at /tmp and
/dev/shm. Nothing else of the host's file system is there, so neither its other files (the grader's data, other
episodes, the project checkout) nor its AF_UNIX sockets can be reached. The network, PID, IPC, UTS and cgroup
namespaces are unshared. When the harness runs as root the command drops to a per-sandbox unprivileged uid,
reserved host-wide (`uids`; so RLIMIT_NPROC holds: the kernel exempts root) and runs under RLIMIT_AS (memory),
RLIMIT_CPU, RLIMIT_NPROC, RLIMIT_FSIZE (the largest file) and RLIMIT_NOFILE, under a seccomp filter (`seccomp`:
no new user namespaces, mounts, keyrings, bpf, fallocate, ...). Where the host delegates a
cgroup v2, the sandbox's memory as a whole is bounded (`cgroup`). The host keeps at most `output_bytes` of the
output (head and tail), kills the sandbox at its wall-clock timeout, and polls the work dir's size against a fixed
quota: a command that grows it past `disk_bytes` (or `disk_files` entries) is killed, and one that starts past it
does not run. `SandboxResult.limit` says which limit stopped a command. Socket files under readable paths are
covered, so no host service is reachable through them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pathlib
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence

from swerl_jax.sandbox import seccomp
from swerl_jax.sandbox.cgroup import SandboxCgroup, memory_mode
from swerl_jax.sandbox.held_files import held_deleted_bytes
from swerl_jax.sandbox.output import BoundedOutput
from swerl_jax.sandbox.uids import reserve_uid
from swerl_jax.sandbox.workdirs import disk_free, sockets_under, tree_usage

# The host's system folders the sandbox sees read-only (or as the same symlinks, on merged-/usr systems).
_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
INPUTS_DIR = "/run/swerl"  # where a command finds its `inputs`, read-only
DISK_POLL_S = 0.25  # how often a running command's work dir is measured against its quota
# A command travels as one argv string: Linux refuses a single argument over 128 KiB (E2BIG).
MAX_COMMAND_BYTES = 100_000


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces on this machine."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed command (SECURITY.md's table says how each is enforced).

    memory_bytes caps the address space of each process (RLIMIT_AS) and, where the host delegates a cgroup v2
    (`cgroup.memory_mode()`), the sandbox's memory as a whole (`memory.max`, no swap); cpu_seconds the CPU time
    (RLIMIT_CPU), processes the number of processes of the sandbox's uid (RLIMIT_NPROC, only when running as root;
    also `pids.max` in a cgroup), timeout_s the wall clock, file_bytes the largest file it can write
    (RLIMIT_FSIZE), disk_bytes / disk_files the work dir's size and entry count (fixed for the work dir's life: a
    command that starts over them does not run; `fallocate` is refused; the rest is polled),
    tmp_bytes / shm_bytes the sizes of its private /tmp and /dev/shm, output_bytes the output the host keeps (the
    first and last halves), open_files the open files of a process (RLIMIT_NOFILE).
    """

    memory_bytes: int = 8 << 30
    cpu_seconds: int = 3600
    processes: int = 512
    timeout_s: float = 1800.0
    file_bytes: int = 2 << 30
    disk_bytes: int = 8 << 30
    disk_files: int = 1_000_000
    tmp_bytes: int = 1 << 30
    shm_bytes: int = 256 << 20
    output_bytes: int = 64 << 20
    open_files: int = 1024


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed command did: exit code (None when the host killed it), its output (stdout and stderr;
    past `output_bytes`, the head and tail around a note), whether it timed out, and `limit`: None, or the limit
    the host stopped it at ("timeout", "disk", or "idle": no output for the caller's idle timeout)."""

    returncode: int | None
    output: str
    timed_out: bool
    wall_s: float
    limit: str | None = None


def bwrap_path() -> str:
    """The bubblewrap binary, or SandboxUnavailable saying how to install it."""
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: `apt-get install -y bubblewrap` (make install-dev does it)"
        )
    _check_bwrap(path)
    return path


@functools.cache
def _check_bwrap(path: str) -> None:
    """bubblewrap must size its tmpfs mounts (--size, bubblewrap >= 0.7): /tmp and /dev/shm are host memory."""
    usage = subprocess.run([path, "--help"], capture_output=True, text=True).stdout
    if "--size" not in usage:
        raise SandboxUnavailable(f"{path} cannot bound its tmpfs mounts (no --size): bubblewrap >= 0.7 is needed")


class Sandbox:
    """Runs shell commands under bubblewrap with one writable work dir.

    readable: paths the command may read besides the system folders: interpreters, a cached environment, the
    clone a checkout's git objects point to. Nothing else of the host is visible.
    """

    def __init__(self, readable: Sequence[str | os.PathLike] = (), limits: SandboxLimits = SandboxLimits()):
        self.bwrap = bwrap_path()
        self.readable = [pathlib.Path(p).resolve() for p in readable]
        self.limits = limits
        # A socket file under a readable path would connect the command to a host service: each is covered by an
        # empty read-only file in the sandbox's view (a read-only mount does not stop connect()).
        self.sockets = [sock for p in self.readable if p.exists() for sock in _sockets(p)]
        self.memory_mode = memory_mode()  # "cgroup" or "seccomp" (SECURITY.md: what each bounds)
        try:  # built here, once per process, so a host without libseccomp fails at once, naming the fix
            seccomp.filter_bpf(refuse_memfd=self.memory_mode != "cgroup")
        except seccomp.SeccompUnavailable as err:
            raise SandboxUnavailable(f"{err} (make install-dev installs both)") from None

    def _argv(self, workdir: pathlib.Path, inputs: pathlib.Path | None, command: str, network: bool,
              env: Mapping[str, str], uid: int | None, limits: SandboxLimits, seccomp_fd: int,
              supervisor_uid: int | None = None, read_only: Sequence[pathlib.Path] = ()) -> list[str]:
        argv = [self.bwrap]
        for path in _SYSTEM:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        if network:  # the name server: /etc/resolv.conf may link to a file under /run
            resolv = os.path.realpath("/etc/resolv.conf")
            if not resolv.startswith("/etc/"):
                argv += ["--ro-bind-try", resolv, resolv]
        argv += ["--dev", "/dev", "--proc", "/proc"]
        # bwrap's /dev/shm is root's 0755: the sandbox uid needs it for multiprocessing's semaphores.
        argv += ["--perms", "01777", "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm"]
        argv += ["--perms", "01777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
        bound: list[pathlib.Path] = [pathlib.Path(p) for p in _SYSTEM]
        made: set[pathlib.Path] = set()
        mounts = [(p, p, "--ro-bind") for p in self.readable if p.exists()]
        mounts.append((workdir, workdir, "--bind"))
        if inputs is not None:
            mounts.append((inputs, pathlib.Path(INPUTS_DIR), "--ro-bind"))
        for path, target, how in sorted(mounts, key=lambda m: len(m[1].parts)):
            if any(target.is_relative_to(b) for b in bound) and how == "--ro-bind":
                continue  # already visible (under /usr, or under another readable path)
            # bwrap would create the mount point's parents 0700; the sandbox uid must be able to traverse them.
            for parent in reversed(target.parents):
                if parent != pathlib.Path("/") and parent not in made and not any(
                        parent.is_relative_to(b) for b in bound):
                    argv += ["--perms", "0755", "--dir", str(parent)]
                    made.add(parent)
            argv += [how, str(path), str(target)]
            bound.append(target)
        for path in read_only:  # over the work dir's writable bind (later mounts cover earlier ones)
            if path.is_dir() and path.is_relative_to(workdir) and not path.is_symlink():
                argv += ["--ro-bind", str(path), str(path)]
        for sock in self.sockets:
            argv += ["--ro-bind", "/dev/null", str(sock)]
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
                 "--new-session"]
        if not network:
            argv.append("--unshare-net")
        argv += ["--clearenv", "--chdir", str(workdir)]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        # The filter is loaded last, just before bubblewrap execs the command (setpriv), so it binds all of it.
        # It also refuses new user namespaces (`unshare -r` gave the command root over one): bubblewrap's
        # --disable-userns needs --unshare-user, which a root bubblewrap would map to root, and a second
        # bubblewrap run as the sandbox uid to get one cost +7 ms a command (+30%).
        argv += ["--seccomp", str(seccomp_fd), "--"]
        if supervisor_uid is not None:  # see `run(supervisor=True)`: only what dropping a child to `uid` needs
            caps = "-all,+setuid,+setgid,+kill"
            argv += ["setpriv", f"--reuid={supervisor_uid}", f"--regid={supervisor_uid}", "--clear-groups",
                     f"--inh-caps={caps}", f"--ambient-caps={caps}", f"--bounding-set={caps}", "--"]
        elif uid is not None:
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
        inputs: Mapping[str, str] | None = None,
        idle_timeout_s: float | None = None,
        supervisor: bool = False,
        read_only: Sequence[str | os.PathLike] = (),
    ) -> SandboxResult:
        """Run `command` (bash) in the sandbox with cwd = workdir, the only writable host path.

        The work dir is handed to the sandbox uid first (when running as root). env replaces the environment
        (HOME defaults to the work dir, PATH to the system one). inputs ({name: text}) are files the host writes
        into a fresh private folder the command reads at /run/swerl ($INPUTS): test patches and scripts enter the
        sandbox there, never through a path the command could have planted a link at. network=True is for
        installs from a package index before any model-written code is in the work dir. A command over
        MAX_COMMAND_BYTES is a ValueError (the caller bounds model-written commands first). idle_timeout_s: kill
        the command when it prints nothing for that long (limit "idle"): a supervisor inside that writes a
        heartbeat, stopped or killed by the code it supervises, is seen within seconds, not at the wall clock.
        supervisor: when running as root, the command starts as a second reserved uid holding only CAP_SETUID,
        CAP_SETGID and CAP_KILL (ambient, bounding set the same), and $SWERL_TEST_UID names the uid that owns the
        work dir: a supervisor (the verdict driver) drops each child it starts to that uid, which then cannot
        signal, trace or read the supervisor. Elsewhere (no root) the variable is absent and one uid runs all.
        read_only: folders inside the work dir that the command sees read-only (bound over the writable work dir).
        """
        workdir = pathlib.Path(workdir).resolve()
        if not workdir.is_dir():
            raise FileNotFoundError(f"sandbox work dir {workdir} does not exist")
        if len(command.encode("utf-8", errors="surrogateescape")) > MAX_COMMAND_BYTES or "\0" in command:
            raise ValueError(f"a sandbox command must be under {MAX_COMMAND_BYTES} bytes, without NUL bytes")
        limits = limits or self.limits
        full_env = {"HOME": str(workdir), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                    "INPUTS": INPUTS_DIR}
        full_env.update(env or {})
        # host-only, so the command cannot write it; made only when there are inputs (a tool call has none)
        private = pathlib.Path(tempfile.mkdtemp(prefix="swerl-inputs-")) if inputs else None
        try:
            if private is not None:
                private.chmod(0o755)
            for name, text in (inputs or {}).items():
                if "/" in name or name in ("", ".", ".."):
                    raise ValueError(f"sandbox input name {name!r} must be a plain file name")
                (private / name).write_text(text)
                (private / name).chmod(0o644)
            with reserve_uid() as uid, (reserve_uid() if supervisor and uid is not None
                                        else contextlib.nullcontext(None)) as supervisor_uid:
                if supervisor_uid is not None:
                    full_env["SWERL_TEST_UID"] = str(uid)
                start_usage, start_entries = tree_usage(workdir, limits.disk_files, chown_to=uid)
                # The quota is the work dir's, fixed: what killed commands left counts, so a command that starts
                # over it does not run (a quota measured from each command's start would ratchet up).
                if start_usage > limits.disk_bytes or start_entries > limits.disk_files:
                    return SandboxResult(None, "", False, 0.0, "disk")
                free_at_start = disk_free(workdir)
                bpf_fd = seccomp.fd_of(seccomp.filter_bpf(refuse_memfd=self.memory_mode != "cgroup"))
                try:
                    argv = self._argv(workdir, private, command, network, full_env, uid, limits, bpf_fd,
                                      supervisor_uid, [pathlib.Path(p).resolve() for p in read_only])
                    return self._supervise(argv, workdir, limits, free_at_start, bpf_fd, idle_timeout_s)
                finally:
                    os.close(bpf_fd)
        finally:
            if private is not None:
                shutil.rmtree(private, ignore_errors=True)

    def _supervise(self, argv: list[str], workdir: pathlib.Path, limits: SandboxLimits, free_at_start: int,
                   bpf_fd: int, idle_timeout_s: float | None = None) -> SandboxResult:
        """Start the sandbox, keep a bounded part of its output, kill it at the timeout or past the disk quota.

        bubblewrap reports on a status pipe once the sandbox stands (`--json-status-fd`): only a failure before
        that is bubblewrap's own (SandboxUnavailable); what the command prints, "bwrap: ..." included, is its
        output, never taken for an infrastructure failure."""
        # The limits are set by prlimit(1) in front of bwrap, inherited by everything in the sandbox. Not a
        # preexec_fn: that runs Python between fork and exec, which can deadlock in a multithreaded parent
        # (the trainer's JAX threads), and it keeps CPython from using vfork.
        limit = ["prlimit", f"--as={limits.memory_bytes}", f"--cpu={limits.cpu_seconds}",
                 f"--nproc={limits.processes}", f"--fsize={limits.file_bytes}", f"--nofile={limits.open_files}", "--"]
        group = SandboxCgroup(limits.memory_bytes, limits.processes) if self.memory_mode == "cgroup" else None
        if group is not None:  # the first process joins the cgroup before it execs: all the sandbox is inside
            limit = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group.procs), *limit]
        status_read, status_write = os.pipe()
        argv = [argv[0], "--json-status-fd", str(status_write), *argv[1:]]
        start = time.monotonic()
        try:
            proc = subprocess.Popen(limit + argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    pass_fds=(status_write, bpf_fd))
        except BaseException:
            if group is not None:
                group.close()
            raise
        finally:
            os.close(status_write)
        try:
            return self._watch(proc, workdir, limits, start, status_read, free_at_start, group, idle_timeout_s)
        except BaseException:  # a host error (a poll that raised) must not leave the command running unsupervised
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise
        finally:
            if group is not None:
                group.close()

    def _watch(self, proc: subprocess.Popen, workdir: pathlib.Path, limits: SandboxLimits, start: float,
               status_read: int, free_at_start: int, group: SandboxCgroup | None,
               idle_timeout_s: float | None = None) -> SandboxResult:
        """Read the output until the command ends; kill it at the timeout, past the work dir's quota, or after
        `idle_timeout_s` without output."""
        disk_allowed = limits.disk_bytes
        output, stopped = BoundedOutput(limits.output_bytes), None
        next_poll = start + DISK_POLL_S
        last_output = start
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if now - start > limits.timeout_s:
                    stopped = "timeout"
                    break
                if idle_timeout_s is not None and now - last_output > idle_timeout_s:
                    stopped = "idle"
                    break
                if now >= next_poll:
                    next_poll = now + DISK_POLL_S
                    if _over_quota(workdir, limits, disk_allowed, free_at_start, proc.pid):
                        stopped = "disk"
                        break
                wait = min(start + limits.timeout_s, next_poll) - now
                if selector.select(timeout=max(wait, 0.0)):
                    chunk = os.read(proc.stdout.fileno(), 1 << 16)
                    if not chunk:
                        break  # every process that held the pipe has exited (or closed it)
                    output.add(chunk)
                    last_output = time.monotonic()
        if stopped is not None:
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap is the group leader; its PID namespace dies with it
        else:
            try:  # the pipe closed: bwrap is exiting (a command that closed its output still runs to the timeout)
                proc.wait(timeout=max(0.0, start + limits.timeout_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                stopped = "timeout"
        proc.wait()
        proc.stdout.close()
        if stopped is None and _over_quota(workdir, limits, disk_allowed, free_at_start, None):
            stopped = "disk"  # it finished before a poll saw it: still reported, so the caller can say so
        text = output.text()
        if group is not None and group.oom_killed():
            text += f"\n[the sandbox reached its memory bound ({limits.memory_bytes >> 20} MiB): a process was killed]"
        started = _sandbox_started(status_read)
        if stopped is None and proc.returncode != 0 and not started:
            raise SandboxUnavailable(f"bubblewrap failed to start: {text.strip()[:2000]}")
        code = None if stopped is not None else proc.returncode
        return SandboxResult(code, text, stopped == "timeout", time.monotonic() - start, stopped)


@functools.lru_cache(maxsize=256)
def _sockets(path: pathlib.Path) -> tuple[pathlib.Path, ...]:
    """The sockets under a readable path, found once per process: readable paths are host-written caches (an
    interpreter: 60,000 entries, a second to walk), made before the episodes that bind them."""
    return tuple(sockets_under(path))


def _sandbox_started(status_read: int) -> bool:
    """Whether bubblewrap wrote its child's pid on the status pipe (then closes our end). Read without blocking:
    the command may hold the pipe's other end, and it may only add to what bubblewrap wrote first."""
    os.set_blocking(status_read, False)
    data = b""
    try:
        while len(data) < 1 << 16 and (chunk := os.read(status_read, 4096)):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.close(status_read)
    return b'"child-pid"' in data


def _over_quota(workdir: pathlib.Path, limits: SandboxLimits, allowed: int, free_at_start: int,
                root: int | None) -> bool:
    """The work dir holds more than `allowed` bytes or `disk_files` entries, counting the files the sandbox's
    processes (`root` and below; None: it has exited, holding nothing) deleted but still hold open or mapped, which
    no walk of the work dir sees (held_files.py). Only where those cannot be read (a host without the privilege) is
    the file system's loss of free space since the start taken instead: it counts every writer on the host, so
    there a busy disk can stop a command that wrote nothing."""
    used, entries = tree_usage(workdir, limits.disk_files)
    if used > allowed or entries > limits.disk_files:
        return True
    held = 0 if root is None else held_deleted_bytes(root, os.stat(workdir).st_dev)
    if held is None:
        return free_at_start - disk_free(workdir) > limits.disk_bytes
    return used + held > allowed


def limit_note(result: SandboxResult, limits: SandboxLimits) -> str:
    """One line telling the model which limit stopped its command ('' when none did)."""
    if result.limit == "timeout":
        return f"[timed out after {limits.timeout_s:.0f} s; the command was killed]"
    if result.limit == "disk":
        return (f"[stopped: the work dir is past its disk quota ({limits.disk_bytes >> 20} MiB or "
                f"{limits.disk_files} files)]")
    return ""
