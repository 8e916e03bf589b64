"""The sampler process: `python -m swerl_jax.sampler.server --config=experiments/NAME.py [--port=0]`.

It serves each client connection on its own thread over TCP with the `protocol` message format (generation
itself is serialized behind a lock). Connections are admitted in two pools. A new connection is *pending* until
its first message arrives whole and valid (authenticated, with a secret): it must arrive within
`handshake_timeout_s` of connecting and of its own first byte, at most `max_pending` connections are pending at
once, and a new one past that evicts (closes) the oldest pending one. So idle, slow or garbage-sending peers
that never authenticate cost a thread each for a few seconds and can never hold the slots of the clients that
do: those are *active*, at most `max_connections` at once (a client past that waits, pending, for a slot).
An active connection must deliver every message within `frame_timeout_s` of its first byte and may idle up to
`idle_timeout_s` between messages, so a stalled or idle peer holds only its own thread. Without a secret any
local process is a client, so a peer that pings once and then idles could hold a slot for `idle_timeout_s`:
there the idle timeout is `open_idle_timeout_s` (a few seconds; the client reconnects transparently). Requests
are limited to `max_header_bytes` + `max_body_bytes`, checked (with the MAC over the declared lengths) before a
byte of them is read. Any malformed message gets an error reply; the server stays up.
Between requests it loads the newest published policy version from `sampler.weights_dir`; a request with
`min_policy_version` above the loaded one waits for it (up to the request's `wait_timeout_s`). It binds
127.0.0.1 by default; binding any other address requires a shared secret (env var named by --secret_env), and
every message is then authenticated with HMAC-SHA256 bound to a per-connection nonce and counter (see
`protocol`). `shutdown` is accepted only on a server with a secret; stop one without by a signal.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import os
import pathlib
import socket
import sys
import threading

from swerl_jax.data.paths import user_path
from swerl_jax.resolve import absolute_paths, resolve_config
from swerl_jax.runs import affinity
from swerl_jax.sampler import protocol
from swerl_jax.sampler.engine import SamplingEngine
from swerl_jax.sampler.factory import load_engine
from swerl_jax.sampler.types import SECRET_ENV, RequestTooLarge
from swerl_jax.sampler.weights import WeightWatcher
from swerl_jax.sections import Experiment

log = logging.getLogger("swerl_jax.sampler")

# accept() errors that pass (a flood of connections can exhaust descriptors or buffers for a moment)
_TRANSIENT_ACCEPT_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}


def is_loopback(host: str) -> bool:
    """True when `host` (a name or an address) resolves only to loopback addresses."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


class _Admission:
    """The two connection pools: pending (no valid first message yet; the oldest is evicted when full) and
    active (a valid first message; bounded, a newcomer waits for a slot without blocking the accept loop)."""

    def __init__(self, max_active: int, max_pending: int) -> None:
        if max_active < 1 or max_pending < 1:
            raise ValueError(f"max_connections={max_active} and max_pending={max_pending} must be >= 1")
        self.max_active, self.max_pending = max_active, max_pending
        self._cond = threading.Condition()
        self._pending: dict[socket.socket, None] = {}  # insertion order: the oldest first
        self.active = 0

    @property
    def pending(self) -> int:
        """How many connections are pending now."""
        return len(self._pending)

    def admit(self, conn: socket.socket) -> None:
        """Register a new connection as pending, evicting the oldest pending one when the pool is full."""
        with self._cond:
            self._pending[conn] = None  # first: the pool is never seen short while the evicted one closes
            if len(self._pending) > self.max_pending:
                oldest = next(iter(self._pending))  # not `conn`, the newest
                del self._pending[oldest]
                _close_quietly(oldest)  # wakes its thread's recv, which then ends the connection
                self._cond.notify_all()  # ... or its wait for an active slot

    def promote(self, conn: socket.socket, stopped: threading.Event) -> bool:
        """Move `conn` from pending to active once a slot is free; False when it was evicted meanwhile."""
        with self._cond:
            while conn in self._pending and self.active >= self.max_active and not stopped.is_set():
                self._cond.wait(1.0)  # woken by a release or an eviction; the timeout only notices a shutdown
            if conn not in self._pending or stopped.is_set():
                return False
            del self._pending[conn]
            self.active += 1
            return True

    def release(self, conn: socket.socket, active: bool) -> None:
        """Forget a finished connection (pending or active)."""
        with self._cond:
            if active:
                self.active -= 1
            else:
                self._pending.pop(conn, None)
            self._cond.notify_all()


def _close_quietly(conn: socket.socket) -> None:
    """Shut a connection down from another thread (its owner's blocked recv returns), ignoring a closed one."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class SamplerServer:
    """Accepts connections and answers ping / generate / shutdown messages, one thread per connection.

    `max_connections` bounds the active (authenticated) connections, `max_pending` the connections still
    waiting for their first valid message, `handshake_timeout_s` how long that may take (module docstring).
    """

    def __init__(self, engine: SamplingEngine, host: str = "127.0.0.1", port: int = 0, secret: bytes | None = None,
                 weights_dir: str = "", *, max_connections: int = 16, frame_timeout_s: float = 60.0,
                 idle_timeout_s: float = 600.0, max_header_bytes: int = 1 << 20,
                 max_body_bytes: int = 64 << 20, max_pending: int = 64, handshake_timeout_s: float = 10.0,
                 open_idle_timeout_s: float = 2.0) -> None:
        if not is_loopback(host) and not secret:
            raise ValueError(f"sampler.host={host!r} is not a loopback address: set a shared secret in "
                             f"${SECRET_ENV} (or the env var given by --secret_env) to expose the sampler")
        if handshake_timeout_s <= 0 or open_idle_timeout_s <= 0:
            raise ValueError(f"handshake_timeout_s={handshake_timeout_s} and open_idle_timeout_s="
                             f"{open_idle_timeout_s} must be > 0")
        self.engine = engine
        self.secret = secret or None
        self.watcher = WeightWatcher(weights_dir, like=engine.params) if weights_dir else None
        if getattr(engine, "partial_rollouts", False) and self.watcher is not None:
            engine.weight_source = self.watcher.poll  # asked between decode segments, under the engine lock
        # Without a secret a first message proves nothing: 16 peers that ping once and idle took every active slot
        # for idle_timeout_s (600 s) and a real client waited that long. They now idle out in seconds.
        self.frame_timeout_s = frame_timeout_s
        self.idle_timeout_s = idle_timeout_s if self.secret else min(idle_timeout_s, open_idle_timeout_s)
        self.handshake_timeout_s = handshake_timeout_s
        self.max_header_bytes, self.max_body_bytes = max_header_bytes, max_body_bytes
        self.admission = _Admission(max_connections, max_pending)
        self.sock = socket.create_server((host, port))
        self.address = self.sock.getsockname()[:2]
        self._engine_lock = threading.Lock()  # the engine and the watcher serve one request at a time
        self._stopped = threading.Event()

    def refresh_weights(self) -> None:
        """Load the newest published policy version, if newer than the engine's (call with the engine lock)."""
        if self.watcher is not None and (got := self.watcher.poll()) is not None:
            self.engine.update_params(got[1], got[0])
            log.info("policy version %d ready (%.3fs after publish)", got[0], self.watcher.last_ready_latency_s)

    def serve_forever(self) -> None:
        """Accept connections until `shutdown` (a shutdown message or a call from another thread)."""
        try:
            while not self._stopped.is_set():
                # Never wait for a slot here: a full pool of silent peers must not keep an authenticated
                # client in the backlog. Threads stay bounded: max_pending + max_connections (+ evicted ones
                # finishing).
                try:
                    conn, peer = self.sock.accept()
                except OSError as e:
                    if self._stopped.is_set() or e.errno not in _TRANSIENT_ACCEPT_ERRORS:
                        break  # shutdown() shut the listening socket (or it is unusable)
                    log.warning("accept failed (%s); retrying", e)  # e.g. out of file descriptors: wait, go on
                    self._stopped.wait(0.1)
                    continue
                self.admission.admit(conn)
                threading.Thread(target=self._serve_connection, args=(conn,), name=f"sampler-conn-{peer}",
                                 daemon=True).start()
        finally:
            self.sock.close()

    def shutdown(self) -> None:
        """Stop accepting; serve_forever returns (open connections end with the process)."""
        self._stopped.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass

    def _serve_connection(self, conn: socket.socket) -> None:
        active = False
        try:
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                channel = protocol.Channel.accept(conn, self.secret)
                # Pending: the whole first message within the handshake timeout (it proves the secret).
                msg = self._receive(channel, self.handshake_timeout_s, self.handshake_timeout_s)
                if msg is None or not self.admission.promote(conn, self._stopped):
                    return  # a bad first frame (answered), or evicted while waiting for an active slot
                active = True
                while True:
                    msg_type, fields, arrays = self.handle(msg)
                    channel.send(msg_type, fields, arrays)
                    if msg_type == "bye":
                        self.shutdown()
                        return
                    if self._stopped.is_set():
                        return
                    msg = self._receive(channel, self.idle_timeout_s, self.frame_timeout_s)
                    if msg is None:
                        return
        except (protocol.ConnectionClosed, OSError):
            pass  # the peer left, idled out, was evicted or broke the connection: nothing to answer
        except Exception:  # noqa: BLE001 - one connection's failure never takes the server down
            log.exception("connection failed")
        finally:
            self.admission.release(conn, active)

    def _receive(self, channel: protocol.Channel, idle_s: float, frame_s: float) -> protocol.Message | None:
        """The next message, or None after answering a bad frame (the connection must then be dropped: the
        stream position is unknown). ConnectionClosed / OSError propagate (nothing to answer)."""
        try:
            return channel.recv(self.max_header_bytes, self.max_body_bytes, idle_s, frame_s)
        except protocol.ProtocolError as e:
            channel.send("error", {"code": e.code, "message": str(e)})
            self._drain(channel.sock)
            return None

    def _drain(self, conn: socket.socket, limit: int = 1 << 16) -> None:
        """Read (a bounded amount of) what the peer already sent, so closing does not reset the connection and
        destroy the error reply before the peer reads it."""
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(min(self.frame_timeout_s, self.handshake_timeout_s, 5.0))
        got = 0
        while got < limit and (chunk := conn.recv(limit)):
            got += len(chunk)

    def handle(self, msg: protocol.Message) -> tuple[str, dict, dict]:
        """Answer one message: (type, fields, arrays)."""
        try:
            if msg.type == "ping":
                if self._engine_lock.acquire(blocking=False):  # never wait behind a generation to answer a ping
                    try:
                        self.refresh_weights()
                    finally:
                        self._engine_lock.release()
                e = self.engine
                return "pong", {"policy_version": e.policy_version, "pid": os.getpid(),
                                "max_prompt_len": e.max_prompt_len, "max_new_tokens": e.max_new_tokens,
                                "max_batch": e.max_batch, "activity": e.activity()}, {}
            if msg.type == "shutdown":
                if not self.secret:  # without a secret any local process could stop the trainer's sampler
                    return "error", {"code": "auth", "message": "shutdown needs a sampler started with a shared "
                                     f"secret (${SECRET_ENV}); stop this one with a signal"}, {}
                return "bye", {}, {}
            if msg.type != "generate":
                raise protocol.ProtocolError(f"unknown message type {msg.type!r} (ping, generate, shutdown)")
            req = protocol.parse_generate(msg)
            with self._engine_lock:
                return self._generate(req)
        except RequestTooLarge as e:
            return "error", {"code": "too_large", "message": str(e)}, {}
        except (protocol.ProtocolError, ValueError) as e:
            return "error", {"code": "bad_request", "message": str(e)}, {}
        except TimeoutError as e:
            return "error", {"code": "timeout", "message": str(e)}, {}
        except Exception as e:  # noqa: BLE001 - the trainer gets the reason instead of a dead socket
            log.exception("request failed")
            return "error", {"code": "internal", "message": f"{type(e).__name__}: {e}"}, {}

    def _generate(self, req: protocol.GenerateRequest) -> tuple[str, dict, dict]:
        """Answer a validated generate request (with the engine lock)."""
        self.refresh_weights()
        if req.min_policy_version > self.engine.policy_version:
            if self.watcher is None:
                raise TimeoutError(f"min_policy_version={req.min_policy_version} but the sampler has version "
                                   f"{self.engine.policy_version} and no sampler.weights_dir")
            log.info("waiting for policy version %d (have %d, up to %.0fs)", req.min_policy_version,
                     self.engine.policy_version, req.wait_timeout_s)
            got = self.watcher.wait_for(req.min_policy_version, req.wait_timeout_s)
            if got is not None:
                self.engine.update_params(got[1], got[0])
        groups = self.engine.generate(req.prompts, req.sampling, req.num_samples, req.seed,
                                      prompt_offset=req.prompt_offset)
        fields, arrays = protocol.result_message(groups, self.engine.policy_version)
        return "result", fields, arrays


def server_from_config(config: Experiment, *, host: str, port: int, secret: bytes | None,
                       weights_dir: str, with_tokenizer: bool = True) -> SamplerServer:
    """The sampler process's server: the engine on the newest published version (read once), watching for more."""
    engine, loaded = load_engine(config, with_tokenizer=with_tokenizer, weights_dir=weights_dir)
    server = SamplerServer(engine, host, port, secret, weights_dir)
    if server.watcher is not None and loaded is not None:
        server.watcher.version = loaded  # already in memory: the first request must not read it again
    return server


def main(argv: list[str]) -> None:
    """absl entry point."""
    from absl import flags
    del argv
    f = flags.FLAGS
    if bool(f.config) == bool(f.config_json):
        raise app_usage_error("give exactly one of --config (an experiment file) and --config_json (a saved config)")
    # the typed sections (swerl_jax.config): a bad key or value fails here, naming it, before any weights load
    # the config's paths absolute once (a --config's model.hf_dir, sampler.weights_dir: from the current directory)
    config = resolve_config(absolute_paths(f.config) if f.config else json.loads(open(f.config_json).read()))
    # sampler.cpus (or --cpus, one fleet member's share): before the engine starts JAX's CPU backend (its thread
    # pool is sized from these cores)
    cpus, key = (f.cpus, "--cpus") if f.cpus else (str(config.sampler.cpus), "sampler.cpus")
    try:
        affinity.pin(affinity.parse_cpus(cpus, key), key)
    except ValueError as e:  # one line naming the flag or key, not a traceback in the trainer's error
        raise SystemExit(f"swerl_jax.sampler.server: {e}") from None
    if f.exit_with_parent:
        _exit_with_parent()
    host = f.host or config.sampler.host
    port = f.port if f.port >= 0 else config.sampler.port
    secret = os.environ.get(f.secret_env, "").encode() or None
    weights_dir = user_path(f.weights_dir) or config.sampler.weights_dir  # Orbax refuses a relative path
    server = server_from_config(config, host=host, port=port, secret=secret, weights_dir=weights_dir,
                                with_tokenizer=f.tokenizer)
    if f.port_file:
        tmp = f"{f.port_file}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump({"host": server.address[0], "port": server.address[1], "pid": os.getpid()}, fh)
        os.replace(tmp, f.port_file)  # the client polls for this file: never let it see half of it
    # where this role runs, in its log: the devices JAX gave it and the cores it may use
    import jax
    print(f"sampler placement: devices {[str(d) for d in jax.local_devices()]} "
          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}), cores "
          f"{sorted(os.sched_getaffinity(0))}", flush=True)
    print(f"sampler listening on {server.address[0]}:{server.address[1]} (pid {os.getpid()})", flush=True)
    server.serve_forever()


def app_usage_error(message: str) -> Exception:
    """absl's usage error (printed with the flags' help)."""
    from absl import app

    return app.UsageError(message)


def _exit_with_parent(poll_s: float = 1.0) -> None:
    """Exit when the process that started this one dies (even by SIGKILL), so no orphan holds the port."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        log.warning("parent process %d is gone: exiting", parent)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _define_flags() -> None:
    from absl import flags
    from ml_collections import config_flags
    repo_root = str(pathlib.Path(__file__).resolve().parents[2])
    if repo_root not in sys.path:  # experiments/ import `experiments.base`; the server may start in any directory
        sys.path.insert(0, repo_root)
    config_flags.DEFINE_config_file("config", None, "experiment config file (experiments/NAME.py[:arg])")
    flags.DEFINE_string("config_json", "", "a config saved as JSON (what the trainer passes), instead of --config")
    flags.DEFINE_bool("exit_with_parent", False, "exit when the parent process dies (set by SamplerClient)")
    flags.DEFINE_string("host", "", "bind address (default: sampler.host)")
    flags.DEFINE_integer("port", -1, "TCP port, 0 = any free one (default: sampler.port)")
    flags.DEFINE_string("port_file", "", "write {host, port, pid} JSON here once listening")
    flags.DEFINE_string("secret_env", SECRET_ENV, "env var holding the shared secret")
    flags.DEFINE_string("weights_dir", "", "published policy versions (default: sampler.weights_dir)")
    flags.DEFINE_bool("tokenizer", True, "load the tokenizer (texts and stop strings)")
    flags.DEFINE_string("cpus", "", "cores to pin this process to, as sampler.cpus (e.g. '0-3'); overrides "
                        "sampler.cpus (each member of a sampler fleet gets its own share)")


if __name__ == "__main__":
    from absl import app
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    _define_flags()
    app.run(main)
