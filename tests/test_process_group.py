"""swerl_jax.process_group: Ctrl-C stops the run in progress with SIGINT (it can close its checkpoint writes) and
kills what it started, even a child that ignores SIGINT."""

from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from swerl_jax.process_group import run_child


def test_ctrl_c_stops_the_run_in_progress_and_what_it_started(tmp_path):
    # the run (a stand-in for the trainer) stops on SIGINT; what it started ignores SIGINT and must not outlive it
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    child = textwrap.dedent(f"""
        import pathlib, signal, subprocess, sys, time
        ignore = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(120)"
        helper = subprocess.Popen([sys.executable, "-c", ignore])
        def stop(*_):
            pathlib.Path({str(stopped)!r}).write_text("SIGINT")
            sys.exit(130)
        signal.signal(signal.SIGINT, stop)
        pathlib.Path({str(started)!r}).write_text(f"{{helper.pid}}")
        time.sleep(120)
    """)
    main_thread = threading.main_thread().ident

    def press_ctrl_c():  # once the run is up: waits on an event, not on a guessed duration
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(main_thread, signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_child([sys.executable, "-c", child], cwd=tmp_path, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    assert stopped.read_text() == "SIGINT"  # it was asked to stop (and could close its checkpoint writes)
    helper = int(started.read_text())
    deadline = time.monotonic() + 30
    while _alive(helper) and time.monotonic() < deadline:  # killed; its parent gone, init reaps it
        time.sleep(0.02)
    assert not _alive(helper)


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")
