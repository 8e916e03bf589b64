"""The trainer's handle on the sampler process: start or connect, send requests, notice death, restart.

    client = SamplerClient(config_path="experiments/tiny_cpu.py", overrides=["--config.sampler.max_batch=16"])
    groups = client.generate(prompts, SamplingParams(temperature=1.0), num_samples=16, min_policy_version=v)
    client.close()

A request that times out (`timeout_s`) or hits a dead connection is retried once on a restarted server when
the client started the server itself and `max_restarts` allows; otherwise it fails with a `SamplerError`
naming the address, the cause and the end of the server's log. Errors the server answers with (a prompt too
long for the cache, a bad field) raise `SamplerRequestError` and are never retried.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

from swerl_jax.sampler import protocol
from swerl_jax.sampler.types import SECRET_ENV, Completion, SamplingParams


def parse_address(address: str, key: str = "address") -> tuple[str, int]:
    """ "host:port" (IPv6 as "[::1]:port") of a sampler server -> (host, port); the error names `key`, the
    setting that gave it (CurateConfig.sampler_address, --address, the eval config's address)."""
    host, sep, port = address.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{key} must be host:port (e.g. 127.0.0.1:7000), got {address!r}")
    return host, int(port)


class SamplerError(RuntimeError):
    """The sampler process is dead, hung or unreachable."""


class SamplerRequestError(RuntimeError):
    """The sampler answered with an error message (code in `self.code`: too_large, bad_request, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"sampler error [{code}]: {message}")
        self.code = code


class SamplerClient:
    """Starts (or connects to) a sampler server and talks to it."""

    def __init__(self, address: tuple[str, int] | None = None, *, config_path: str = "",
                 overrides: Sequence[str] = (), secret: bytes | None = None, timeout_s: float = 600.0,
                 start_timeout_s: float = 300.0, max_restarts: int = 1, weights_dir: str = "",
                 log_dir: str = "", config_json: str = "", server_args: Sequence[str] = (),
                 server_env: Mapping[str, str] | None = None) -> None:
        """Args:
          address: (host, port) of a running server; None starts one with `config_path` + `overrides`, or with
            `config_json` (a config saved as JSON, e.g. by the trainer). A started server exits with this process.
          secret: shared secret for HMAC (also handed to a started server through its environment). A client that
            starts its own server and is given none makes a random per-run secret, so no other process can talk to
            (or shut down) that server.
          timeout_s: per-request limit; past it the server counts as hung.
          start_timeout_s: how long a started server may take to answer its first ping (loading, compiling).
          max_restarts: how many times a started server is restarted after dying or hanging (0: fail at once).
          weights_dir: passed to a started server as --weights_dir.
          log_dir: where a started server's stdout/stderr go (default: a temporary folder).
          server_args: more flags for a started server's command line (e.g. ["--cpus=2-3"]: the cores of one
            member of a sampler fleet, instead of sampler.cpus); kept for its restarts.
          server_env: environment variables set for a started server over this process's (e.g.
            {"CUDA_VISIBLE_DEVICES": "6"}: a fleet member's GPUs, `runs.affinity.device_env`); kept for restarts.
        """
        if address is None and not (config_path or config_json):
            raise ValueError("SamplerClient needs an address, or a config_path / config_json to start a server with")
        if secret is None and address is None:
            secret = secrets.token_hex(32).encode()  # per-run: only this client (and its server) know it
        self.secret = secret
        self.timeout_s, self.start_timeout_s = timeout_s, start_timeout_s
        self.max_restarts, self.restarts = max_restarts, 0
        source = [f"--config_json={config_json}"] if config_json else [f"--config={config_path}", *overrides]
        self._cmd_args = [*source, "--exit_with_parent"] + ([f"--weights_dir={weights_dir}"] if weights_dir else []) \
            + list(server_args)
        self._server_env = dict(server_env or {})
        self._log_dir = pathlib.Path(log_dir or tempfile.mkdtemp(prefix="swerl_sampler_"))
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self._stopping = False  # set by kill(), and by close() of a started server: no restart, no new request
        self._sock: socket.socket | None = None
        self._channel: protocol.Channel | None = None
        self.address = address
        if address is None:
            self._start()
        else:
            self.ping()

    # --- process management ---------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """Whether the server is being stopped (`kill`, `close`, or Ctrl-C reached it): a request failing now is
        the run stopping, not a server to restart or a part to re-send elsewhere."""
        return self._stopping

    @property
    def log_path(self) -> pathlib.Path:
        """The started server's combined stdout/stderr."""
        return self._log_dir / "sampler.log"

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def _start(self) -> None:
        port_file = self._log_dir / "port.json"
        port_file.unlink(missing_ok=True)
        env = {**os.environ, **self._server_env}
        if self.secret:
            env[SECRET_ENV] = self.secret.decode()
        cmd = [sys.executable, "-m", "swerl_jax.sampler.server", *self._cmd_args, "--port=0",
               f"--port_file={port_file}"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.start_timeout_s
        while not port_file.exists():
            if self.proc.poll() is not None:
                if self._stopping or self.proc.returncode == -signal.SIGINT:  # our shutdown's kill, or Ctrl-C
                    self._stopping = True
                    raise SamplerError("the sampler was stopped while starting: the run is stopping (its own "
                                       "shutdown or Ctrl-C, not a crash)")
                raise SamplerError(f"sampler process exited with code {self.proc.returncode} while starting "
                                   f"({' '.join(cmd)}); log tail:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self._kill()
                raise SamplerError(f"sampler did not start listening within {self.start_timeout_s:.0f}s; "
                                   f"log tail:\n{self._log_tail()}")
            time.sleep(0.05)
        info = json.loads(port_file.read_text())
        self.address = (info["host"], int(info["port"]))
        self.ping(timeout_s=max(1.0, deadline - time.monotonic()))

    def _kill(self) -> None:
        self._disconnect()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # it may be hung: no graceful path
            self.proc.wait(timeout=30)

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._channel = None

    def restart(self) -> None:
        """Kill the started server (if alive) and start a fresh one."""
        if self.proc is None:
            raise SamplerError(f"cannot restart the sampler at {self.address}: this client did not start it")
        self._kill()
        self.restarts += 1
        self._start()

    def kill(self) -> None:
        """Stop a started server at once (SIGKILL) and close the connection: for a client whose connection another
        thread is using (a request waiting for a policy version that will never come). That request fails with a
        `SamplerError`; nothing is restarted."""
        self._stopping = True
        self._kill()

    def close(self) -> None:
        """Stop a started server (shutdown message, then kill) and close the connection. A client of a server it
        did not start only disconnects, and its next request connects again (the curation predictor does so)."""
        if self.proc is not None:
            self._stopping = True  # the server is going: a request failing now must not restart it
        if self.proc is not None and self.proc.poll() is None:
            try:
                self._call("shutdown", {}, {}, timeout_s=5.0)
                self.proc.wait(timeout=10)
            except (OSError, protocol.ProtocolError, subprocess.TimeoutExpired, SamplerError):
                pass
        self._kill()

    def __enter__(self) -> SamplerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- requests -------------------------------------------------------------------------------------------

    def _call(self, msg_type: str, fields: dict, arrays: dict, timeout_s: float) -> protocol.Message:
        """One request/response on the persistent connection; raises OSError/ProtocolError on transport failure.

        A kept-open connection the server has since closed (it drops connections idle past its idle timeout)
        is replaced once: a server closes only between messages, so the request was not served.
        """
        reused = self._channel is not None
        try:
            return self._call_once(msg_type, fields, arrays, timeout_s)
        except (protocol.ConnectionClosed, ConnectionResetError, BrokenPipeError):
            if not reused:
                raise
            return self._call_once(msg_type, fields, arrays, timeout_s)

    def _call_once(self, msg_type: str, fields: dict, arrays: dict, timeout_s: float) -> protocol.Message:
        if self._stopping and msg_type != "shutdown":
            raise SamplerError(f"the sampler at {self.address} was stopped while a request was in flight (or "
                               "before it was sent)")
        try:
            if self._channel is None:
                self._sock = socket.create_connection(self.address, timeout=timeout_s)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._channel = protocol.Channel.connect(self._sock, self.secret)
            # local references: kill() from another thread may clear self._sock / self._channel mid-request;
            # the closed socket then fails this request with an OSError, not an AttributeError
            sock, channel = self._sock, self._channel
            sock.settimeout(timeout_s)
            channel.send(msg_type, fields, arrays)
            reply = channel.recv()
        except BaseException:
            self._disconnect()  # the stream is out of step after any failure mid-request
            raise
        if reply.type == "error":
            raise SamplerRequestError(str(reply.fields.get("code")), str(reply.fields.get("message")))
        return reply

    def _request(self, msg_type: str, fields: dict, arrays: dict, timeout_s: float | None = None) -> protocol.Message:
        timeout_s = timeout_s or self.timeout_s
        while True:
            try:
                return self._call(msg_type, fields, arrays, timeout_s)
            except (OSError, protocol.ProtocolError) as e:  # socket.timeout is an OSError
                if self._stopping:  # close() or kill() from another thread: the run is ending
                    raise SamplerError(f"the sampler at {self.address} was stopped while a request was in flight "
                                       f"({type(e).__name__})") from e
                dead = self.proc is not None and self.proc.poll() is not None
                if dead and self.proc.returncode == -signal.SIGINT:  # Ctrl-C reached its process group too
                    self._stopping = True
                    raise SamplerError(f"the sampler at {self.address} was interrupted (SIGINT: Ctrl-C); the run "
                                       "is stopping, so it is not restarted") from e
                cause = (f"sampler process died (exit code {self.proc.returncode})" if dead else
                         f"no answer from the sampler at {self.address} within {timeout_s:.0f}s"
                         if isinstance(e, TimeoutError) else f"connection to the sampler at {self.address} failed")
                if self.proc is None or self.restarts >= self.max_restarts:
                    raise SamplerError(f"{cause}: {type(e).__name__}: {e}; restarts used {self.restarts}/"
                                       f"{self.max_restarts}. Log tail:\n{self._log_tail()}") from e
                self.restart()

    def ping(self, timeout_s: float | None = None) -> dict:
        """The server's status: policy_version, pid and its limits."""
        return self._request("ping", {}, {}, timeout_s).fields

    def activity(self, timeout_s: float = 5.0) -> dict:
        """What the server's engine is doing (`SamplingEngine.activity`: prompts done, tokens, a compilation),
        asked on a connection of its own, so it answers while this client's generate is in flight (the server
        answers a ping without waiting for the engine). {} when the server cannot be asked: progress only."""
        if self.address is None or self._stopping:
            return {}
        try:
            with socket.create_connection(self.address, timeout=timeout_s) as sock:
                channel = protocol.Channel.connect(sock, self.secret)
                channel.send("ping", {}, {})
                reply = channel.recv()
        except (OSError, protocol.ProtocolError):
            return {}
        activity = reply.fields.get("activity") if reply.type == "pong" else None
        return dict(activity) if isinstance(activity, dict) else {}

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams = SamplingParams(),
                 num_samples: int = 1, seed: int = 0, min_policy_version: int = 0,
                 wait_timeout_s: float = 60.0, *, prompt_offset: int = 0) -> list[list[Completion]]:
        """Sample `num_samples` completions per prompt with a policy version >= `min_policy_version`.

        `prompt_offset`: the prompts are prompts `prompt_offset`, `prompt_offset + 1`, ... of a larger request
        (their random keys and `prompt_index`), so a request split across servers samples what the whole would.
        """
        fields, arrays = protocol.generate_request(list(prompts), sampling, num_samples, seed, min_policy_version,
                                                   wait_timeout_s, prompt_offset)
        reply = self._request("generate", fields, arrays, self.timeout_s + wait_timeout_s)
        if prompts and reply.fields.get("prompt_offset", 0) != prompt_offset:
            raise SamplerRequestError("bad_request", f"the sampler at {self.address} answered for prompt_offset "
                                      f"{reply.fields.get('prompt_offset', 0)}, not {prompt_offset} (a server "
                                      "older than prompt_offset?)")
        return protocol.parse_result(reply)
