"""Adversarial commands against the sandbox's bounds (issue 45, defects 3, 4, 7 and 8's socket): disk reserved in
one call or kept by a killed command, memory held by many processes or in memfds, nested user namespaces, two
sandboxes on one uid, and a host socket under a read-only path. Each was reproduced on the code before the fix."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from swerl_jax.agent.actions import format_action
from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.synthetic import SyntheticTasks
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits
from swerl_jax.sandbox.cgroup import memory_mode
from swerl_jax.sandbox.workdirs import tree_usage

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install-dev)")
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PY = pathlib.Path(sys.base_prefix) / "bin" / "python3"
QUOTA = 16 << 20
LIMITS = SandboxLimits(memory_bytes=256 << 20, cpu_seconds=60, processes=64, timeout_s=60, file_bytes=64 << 20,
                       disk_bytes=QUOTA, tmp_bytes=16 << 20, shm_bytes=8 << 20, output_bytes=1 << 20)


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox(readable=[sys.base_prefix], limits=LIMITS)


@pytest.fixture
def workdir(tmp_path) -> pathlib.Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def python(code: str) -> str:
    """A shell command running `code` with the real interpreter (quoted for bash)."""
    return f"{PY} -c '{code}'"


def test_fallocate_cannot_reserve_past_the_quota(sandbox, workdir):
    """Defect 3: `fallocate` reserved 6,000 MiB in 0.09 s under a 512 MiB quota, before the first poll."""
    # each file under the largest-file limit (64 MiB), 128 MiB in all, in one call each
    result = sandbox.run("for i in 1 2 3 4; do fallocate -l 32M a$i; echo rc=$?; done", workdir)
    used, _ = tree_usage(workdir, LIMITS.disk_files)
    assert used <= QUOTA, (used, result.output)
    assert "rc=0" not in result.output


def test_a_killed_commands_files_do_not_raise_the_next_allowance(sandbox, workdir):
    """Defect 3: the quota ratcheted: a command's allowance started from what the killed one before it left."""
    first = sandbox.run("for i in $(seq 24); do head -c 1M /dev/zero > f$i; done", workdir)
    assert first.limit == "disk"
    second = sandbox.run("touch ran; head -c 8M /dev/zero > more", workdir)
    assert second.limit == "disk" and not (workdir / "ran").exists() and not (workdir / "more").exists()


def test_memory_of_many_processes_is_bounded_together(sandbox, workdir):
    """Defect 4: RLIMIT_AS is per process: 15 processes held 2.5 GiB under a 256 MiB limit. With a cgroup the
    sandbox's total is bounded; without one, memfd_create (memory that counts against no process) is refused."""
    if memory_mode() != "cgroup":
        result = sandbox.run(python("import os; os.memfd_create(\"x\"); print(\"MADE\")"), workdir)
        assert "MADE" not in result.output and "PermissionError" in result.output, result.output
        return
    # 15 processes each fill 64 MiB and hold it until all are either holding or dead (events, not sleeps)
    hold = ("import os, select\nheld_r, held_w = os.pipe()\nrelease_r, release_w = os.pipe()\npids = {}\n"
            "for i in range(15):\n    pid = os.fork()\n    if pid == 0:\n        os.close(release_w)\n"
            "        b = bytearray(b'x') * (64 << 20)\n        os.write(held_w, bytes([i]))\n"
            "        os.read(release_r, 1)\n        os._exit(0)\n    pids[os.pidfd_open(pid)] = i\n"
            "os.close(held_w)\nheld, dead = set(), set()\nwhile len(held | dead) < 15:\n"
            "    waiting = [held_r] + [fd for fd, i in pids.items() if i not in dead]\n"
            "    for fd in select.select(waiting, [], [])[0]:\n"
            "        if fd == held_r:\n            held.update(os.read(held_r, 64))\n"
            "        else:\n            dead.add(pids[fd])\n"
            "print('HELD ' * len(held - dead), flush=True)\nos.close(release_w)\n")
    (workdir / "hold.py").write_text(hold)
    result = sandbox.run(f"{PY} hold.py", workdir, limits=LIMITS)
    assert result.output.count("HELD") < 4, result.output  # 256 MiB in all: at most three 64 MiB blocks


def test_memfd_cannot_hold_memory_outside_the_bound(sandbox, workdir):
    """Defect 4: one process held 3 GiB in 12 memfds in 2.4 s: memfd pages count against no process."""
    code = ("import os\nfor i in range(6):\n    fd = os.memfd_create(str(i))\n    os.ftruncate(fd, 64 << 20)\n"
            "    os.pwrite(fd, b'x', (64 << 20) - 1)\n    m = open(fd, 'r+b', closefd=False)\n"
            "    for off in range(0, 64 << 20, 1 << 20):\n        os.pwrite(fd, bytes(1 << 20), off)\n"
            "print('HELD 384 MiB')\n")
    (workdir / "memfd.py").write_text(code)
    result = sandbox.run(f"{PY} memfd.py", workdir)
    assert "HELD" not in result.output, result.output


def test_sysv_shared_memory_cannot_hold_memory_outside_the_bound(sandbox, workdir):
    """Held-out red team (2026-11-27): four detached 128 MiB SysV segments held 512 MiB under a 256 MiB limit, like
    memfd: their pages count against no process."""
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.shmat.restype = ctypes.c_void_p\n"
            "libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\n"
            "libc.shmdt.argtypes = [ctypes.c_void_p]\nheld = 0\n"
            "for k in range(6):\n    i = libc.shmget(0, ctypes.c_size_t(64 << 20), 0o1600)\n    if i < 0:\n"
            "        print('shmget errno', ctypes.get_errno())\n        break\n    a = libc.shmat(i, None, 0)\n"
            "    ctypes.memset(a, 1, 64 << 20)\n    libc.shmdt(ctypes.c_void_p(a))\n    held += 64\n"
            "print('HELD', held, 'MiB')\n")
    (workdir / "shm.py").write_text(code)
    result = sandbox.run(f"{PY} shm.py", workdir)
    assert "HELD 384 MiB" not in result.output, result.output


def test_no_nested_user_namespace(sandbox, workdir):
    """Defect 7: `unshare -r` gave root in a new user namespace inside the sandbox."""
    result = sandbox.run("unshare -r id -u; echo rc=$?; unshare --user --map-root-user --fork id -u; echo rc=$?",
                         workdir)
    assert "rc=0" not in result.output and "\n0\n" not in f"\n{result.output}", result.output


def test_refused_calls_fail_with_an_error_not_a_kill(sandbox, workdir):
    """Defect 7: the seccomp filter answers with an error the command sees (EPERM / EOPNOTSUPP), never a kill."""
    code = ("import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "for name, call in (('keyctl', 250), ('bpf', 321), ('perf_event_open', 298), ('userfaultfd', 323)):\n"
            "    r = libc.syscall(call, 0, 0, 0, 0, 0)\n"
            "    print(name, r, errno.errorcode.get(ctypes.get_errno()))\n")
    if os.uname().machine != "x86_64":
        pytest.skip("the raw call numbers are x86_64's")
    (workdir / "calls.py").write_text(code)
    result = sandbox.run(f"{PY} calls.py", workdir)
    assert result.returncode == 0, result.output
    for name in ("keyctl", "bpf", "perf_event_open", "userfaultfd"):
        assert f"{name} -1 EPERM" in result.output, result.output


@pytest.mark.skipif(os.geteuid() != 0, reason="per-sandbox uids are used only when the host is root")
def test_concurrent_sandboxes_never_share_a_uid(tmp_path):
    """Defect 7: uids were picked by pid mod 4096, so two harness processes could run sandboxes on one uid (and
    one process limit). Two processes that look alike to that rule (the same pid) each run a sandbox at once."""
    child = ("import os, pathlib, sys\nos.getpid = lambda: 12345\n"
             "from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits\n"
             "work = pathlib.Path(sys.argv[1])\n"
             "r = Sandbox(limits=SandboxLimits(timeout_s=120)).run("
             "'id -u > uid; while [ ! -e go ]; do sleep 0.05; done', work)\n"
             "print(r.returncode, r.output)\n")
    works = [tmp_path / f"w{i}" for i in range(2)]
    procs = []
    for work in works:
        work.mkdir()
        procs.append(subprocess.Popen([sys.executable, "-c", child, str(work)], cwd=REPO_ROOT,
                                      env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}))
    try:
        deadline = time.monotonic() + 120
        while not all((w / "uid").exists() and (w / "uid").read_text().strip() for w in works):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a sandbox did not start"
            time.sleep(0.02)
        uids = [(w / "uid").read_text().strip() for w in works]
    finally:
        for work in works:
            (work / "go").touch()
        for proc in procs:
            proc.wait(timeout=120)
    assert uids[0] != uids[1], uids


def test_a_socket_under_a_readable_path_does_not_connect(tmp_path, workdir):
    """Defect 8: a host socket file under a read-only bound path connected (a read-only mount does not stop it)."""
    cache = tmp_path / "c"
    cache.mkdir()
    path = cache / "s"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen()
    accepted = threading.Event()
    threading.Thread(target=lambda: (server.accept(), accepted.set()), daemon=True).start()
    try:
        sandbox = Sandbox(readable=[sys.base_prefix, cache], limits=LIMITS)
        code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{path}\"); print(\"CONNECTED\")"
        result = sandbox.run(python(code), workdir)
        assert "CONNECTED" not in result.output and not accepted.is_set(), result.output
    finally:
        server.close()


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> SyntheticTasks:
    return SyntheticTasks(tmp_path_factory.mktemp("tasks"), 1, seed=0)


def test_an_episode_ends_when_a_step_leaves_its_work_dir_over_the_quota(tasks, tmp_path):
    """Defect 3: the episode went on over its quota (and each next command's allowance started higher)."""
    root = tmp_path / "run" / "episodes"
    limits = SandboxLimits(memory_bytes=1 << 30, cpu_seconds=60, processes=64, timeout_s=60, file_bytes=64 << 20,
                           disk_bytes=48 << 20, tmp_bytes=16 << 20, shm_bytes=8 << 20, output_bytes=1 << 20)
    env = SWEEnv(tasks.instances[0], tasks.root / "repos", root, reward="execution",
                 executor=tasks.executor(root / "grade"), step_timeout_s=30, limits=limits)
    env.reset()
    try:
        command = "for i in $(seq 64); do head -c 1M /dev/zero > fill_$i; done; echo finished"
        observation, done, info = env.step(format_action("execute_bash", command=command))
        assert done and info["termination"] == "disk", observation
        assert "disk quota" in observation and "episode ends" in observation, observation
    finally:
        env.close()
