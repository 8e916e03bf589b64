"""The sandbox's promises: no network, no write outside the work dir, the memory cap, the process cap, the timeout."""

import pathlib
import shutil
import socket
import sys
import threading

import pytest

from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install-dev)")
PY = pathlib.Path(sys.base_prefix) / "bin" / "python3"  # a real interpreter, possibly under /root (pyenv)


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox(readable=[sys.base_prefix], limits=SandboxLimits(timeout_s=120))


@pytest.fixture
def workdir(tmp_path) -> pathlib.Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def test_runs_in_work_dir_and_writes_there(sandbox, workdir):
    result = sandbox.run("pwd; echo hi > made.txt", workdir)
    assert result.returncode == 0, result.output
    assert result.output.strip() == str(workdir)
    assert (workdir / "made.txt").read_text() == "hi\n"


def test_no_network_even_to_the_hosts_loopback(sandbox, workdir):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = threading.Event()
    threading.Thread(target=lambda: (server.accept(), accepted.set()), daemon=True).start()
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10); print('CONNECTED')"
    result = sandbox.run(f"{PY} -c \"{code}\"", workdir)
    assert result.returncode != 0 and "CONNECTED" not in result.output
    assert "Connection refused" in result.output
    # Control: the same command with network allowed does reach the host's server.
    assert sandbox.run(f"{PY} -c \"{code}\"", workdir, network=True).returncode == 0
    assert accepted.wait(60)
    server.close()


def test_nothing_written_outside_the_work_dir(sandbox, workdir, tmp_path):
    outside = tmp_path / "outside.txt"
    home_file = pathlib.Path.home() / f"sandbox_escape_{workdir.parent.name}.txt"
    result = sandbox.run(f"echo x > {outside}; echo x > {home_file}; echo x > /usr/escape.txt; true", workdir)
    assert result.returncode == 0
    assert not outside.exists() and not home_file.exists() and not pathlib.Path("/usr/escape.txt").exists()
    assert "Read-only file system" in result.output


def test_memory_cap(sandbox, workdir):
    limits = SandboxLimits(memory_bytes=512 << 20, timeout_s=120)
    result = sandbox.run(f"{PY} -c \"b = bytearray(2 << 30); print('ALLOCATED')\"", workdir, limits=limits)
    assert result.returncode != 0 and "MemoryError" in result.output and "ALLOCATED" not in result.output
    assert sandbox.run(f"{PY} -c \"b = bytearray(64 << 20)\"", workdir, limits=limits).returncode == 0


def test_timeout_kills_the_sandbox(sandbox, workdir):
    result = sandbox.run("sleep 600 & sleep 600", workdir, limits=SandboxLimits(timeout_s=1))
    assert result.timed_out and result.returncode is None


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0,
                    reason="the process cap needs root to drop to the sandbox uid")
def test_process_cap(sandbox, workdir):
    code = ("import os, time\nn = 0\ntry:\n    for _ in range(40):\n        if os.fork() == 0:\n"
            "            time.sleep(600)\n            os._exit(0)\n        n += 1\nexcept BlockingIOError:\n"
            "    print('CAPPED', n)\n")
    (workdir / "forks.py").write_text(code)
    result = sandbox.run(f"{PY} forks.py", workdir, limits=SandboxLimits(processes=16, timeout_s=120))
    assert "CAPPED" in result.output, result.output
    assert int(result.output.split("CAPPED")[1].split()[0]) < 16


def test_work_dir_and_readable_paths_are_reachable_by_path(tmp_path, workdir):
    """Regression: bwrap made the parents of binds under the private /tmp 0700, so the sandbox uid could not `cd`
    to its own work dir by path, nor read a readable dir under /tmp (the env cache in a test run)."""
    shared = tmp_path / "cache" / "env"
    shared.mkdir(parents=True)
    (shared / "data.txt").write_text("shared")
    sandbox = Sandbox(readable=[sys.base_prefix, shared], limits=SandboxLimits(timeout_s=120))
    result = sandbox.run(f"cd {workdir} && cat {shared}/data.txt && touch {shared}/nope", workdir)
    assert "shared" in result.output and "Permission denied" not in result.output, result.output
    assert "Read-only file system" in result.output and not (shared / "nope").exists()


def test_multiprocessing_works_inside(sandbox, workdir):
    """Regression: /dev/shm was root's 0755, so the sandbox uid could not create a semaphore (pylint's -j tests)."""
    code = "import multiprocessing as m; m.Lock(); print(m.Pool(2).map(abs, [-1, -2]))"
    result = sandbox.run(f"{PY} -c '{code}'", workdir)
    assert result.returncode == 0 and "[1, 2]" in result.output, result.output
