"""SamplerClient's process management as a run's shutdown meets it (issue 46 item 15): a server that our own
shutdown kills, or that Ctrl-C interrupted, is reported as stopped, never as a crash to restart."""

from __future__ import annotations

import json
import pathlib
import signal
import socket

import pytest

from swerl_jax.sampler import client as client_module
from swerl_jax.sampler.client import SamplerClient, SamplerError


class _Process:
    """A server process stand-in: `returncode` as given; `on_first_poll` runs once (the run's shutdown, from
    another thread in a real run, handed in at a fixed point here)."""

    on_first_poll = None

    def __init__(self, *args, returncode=None, **kwargs) -> None:
        self.returncode, self.polled = returncode, False

    def poll(self):
        if not self.polled and _Process.on_first_poll is not None:
            self.polled = True
            _Process.on_first_poll()
        return self.returncode

    def kill(self):
        self.returncode = -signal.SIGKILL

    def wait(self, timeout=None):
        return self.returncode


def test_a_server_our_shutdown_kills_while_starting_is_stopped_not_a_crash(tmp_path, monkeypatch):
    """The log said "sampler process exited with code -9 while starting" for the kill our shutdown sent."""
    client = SamplerClient.__new__(SamplerClient)
    monkeypatch.setattr(client_module.subprocess, "Popen", _Process)
    monkeypatch.setattr(_Process, "on_first_poll", client.kill)
    with pytest.raises(SamplerError) as err:
        client.__init__(config_json="unused.json", log_dir=str(tmp_path), start_timeout_s=60)
    assert "stopped while starting" in str(err.value) and "code -9" not in str(err.value), err.value
    assert client.stopping


def test_a_server_interrupted_by_ctrl_c_is_not_restarted(tmp_path, monkeypatch):
    """Ctrl-C reaches the sampler processes too (one process group): one that died of SIGINT is the run stopping;
    restarting it (and our shutdown then killing the restart) printed the misleading lines."""
    with socket.socket() as s:  # a port nothing listens on: requests fail as they do to a dead server
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = []

    def popen(cmd, **kwargs):
        port_file = next(a.split("=", 1)[1] for a in cmd if a.startswith("--port_file="))
        pathlib.Path(port_file).write_text(json.dumps({"host": "127.0.0.1", "port": port}))
        started.append(cmd)
        return _Process(returncode=-signal.SIGINT)

    monkeypatch.setattr(client_module.subprocess, "Popen", popen)
    with pytest.raises(SamplerError, match="interrupted"):
        SamplerClient(config_json="unused.json", log_dir=str(tmp_path), max_restarts=3)
    assert len(started) == 1  # not restarted
