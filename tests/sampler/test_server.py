"""The sampler process: requests, weight versions, errors, a killed and a hung server, authentication."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import threading
import time

import jax
import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.sampler import protocol, weights
from swerl_jax.sampler.client import SamplerClient, SamplerError, SamplerRequestError
from swerl_jax.sampler.engine import SamplingEngine, SamplingParams
from swerl_jax.sampler.server import SamplerServer
from tests.conftest import JAX_CACHE
from tests.sampler.test_protocol import HOSTILE_HEADERS

OVERRIDES = ["--config.model.name=tiny", "--config.seed=0", "--config.sampler.max_new_tokens=16",
             "--config.data.max_prompt_len=32", "--config.sampler.max_batch=8", "--notokenizer"]
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8]]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)


def _local_greedy(params):
    eng = SamplingEngine(get_model_config("tiny"), params, max_batch=8, max_prompt_len=32, max_new_tokens=16)
    return [g[0].tokens.tolist() for g in eng.generate(PROMPTS, GREEDY)]


def test_server_process_versions_errors_kill_and_hang(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(JAX_CACHE))  # restarted servers reuse compiled programs
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    cfg = get_model_config("tiny")
    v0 = init_params(cfg, jax.random.PRNGKey(0))  # what the server's random init (config.seed=0) gives
    v1 = jax.tree.map(lambda x: x * -1.5, v0)
    client = SamplerClient(config_path="experiments/tiny_cpu.py", overrides=OVERRIDES,
                           weights_dir=str(tmp_path / "policy"), timeout_s=120, max_restarts=2,
                           log_dir=str(tmp_path / "log"))
    try:
        assert client.ping()["policy_version"] == 0
        out = client.generate(PROMPTS, GREEDY, num_samples=2)
        assert [g[0].tokens.tolist() for g in out] == _local_greedy(v0)
        assert all(c.policy_version == 0 and c.finish_reason == "length" for g in out for c in g)

        # The trainer publishes version 1; a request that needs it gets it.
        weights.publish(tmp_path / "policy", v1, 1)
        out = client.generate(PROMPTS, GREEDY, min_policy_version=1)
        assert out[0][0].policy_version == 1
        assert [g[0].tokens.tolist() for g in out] == _local_greedy(v1)

        with pytest.raises(SamplerRequestError, match="too_large.*max_prompt_len"):
            client.generate([[1] * 40], GREEDY)
        with pytest.raises(SamplerRequestError, match="timeout.*policy version 2"):
            client.generate(PROMPTS, GREEDY, min_policy_version=2, wait_timeout_s=0.2)

        # kill -9: the next request restarts the server, which loads the newest published version.
        old_pid = client.proc.pid
        os.kill(old_pid, signal.SIGKILL)
        client.proc.wait()
        out = client.generate(PROMPTS, GREEDY)
        assert client.restarts == 1 and client.proc.pid != old_pid
        assert out[0][0].policy_version == 1 and [g[0].tokens.tolist() for g in out] == _local_greedy(v1)

        # A hung server (SIGSTOP) times out and is replaced.
        os.kill(client.proc.pid, signal.SIGSTOP)
        _wait_until_stopped(client.proc.pid)  # every thread: a group stop lands thread by thread
        assert client.ping(timeout_s=2.0)["policy_version"] == 1
        assert client.restarts == 2

        # Restarts exhausted: a clear error instead of a retry loop.
        os.kill(client.proc.pid, signal.SIGKILL)
        client.proc.wait()
        with pytest.raises(SamplerError, match="died.*restarts used 2/2"):
            client.ping()
    finally:
        client.close()
    assert client.proc.poll() is not None


def _wait_until_stopped(pid: int, guard_s: float = 60.0) -> None:
    """Wait (hang guard only) until every thread of `pid` is in the stopped state ('T' in /proc)."""
    deadline = time.monotonic() + guard_s
    while True:
        states = []
        for stat in pathlib.Path(f"/proc/{pid}/task").glob("*/stat"):
            try:
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue
        if states and all(s in ("T", "t") for s in states):
            return
        assert time.monotonic() < deadline, f"process {pid} did not stop: thread states {states}"
        time.sleep(0.01)


@pytest.fixture()
def in_process_server():
    """A SamplerServer with a shared secret on a thread (loopback, port 0)."""
    eng = SamplingEngine(get_model_config("tiny"), init_params(get_model_config("tiny"), jax.random.PRNGKey(0)),
                         max_batch=4, max_prompt_len=16, max_new_tokens=8)
    server = SamplerServer(eng, "127.0.0.1", 0, secret=b"sesame")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    with socket.create_connection(server.address, timeout=60) as s:  # shutdown over the wire, with the secret
        channel = protocol.Channel.connect(s, b"sesame")
        channel.send("shutdown")
        assert channel.recv().type == "bye"
    thread.join(timeout=60)
    assert not thread.is_alive()


def test_shared_secret_is_checked(in_process_server):
    good = SamplerClient(in_process_server.address, secret=b"sesame", timeout_s=60)
    assert good.generate([[1, 2]], GREEDY)[0][0].completion_length == 8
    # the engine's activity, asked on a connection of its own (issue 57 item 7: a trainer's progress bar)
    assert good.activity() == {"prompts": 1, "prompts_done": 1, "tokens": 8, "compiling": ""}
    good.secret = b"guess"
    assert good.activity() == {}  # refused: progress says nothing, and nothing raises
    good.secret = b"sesame"
    good.close()
    with pytest.raises(SamplerError, match="authentication failed"):
        SamplerClient(in_process_server.address, secret=b"guess", timeout_s=10)
    with pytest.raises(SamplerRequestError, match=r"\[auth\]: authentication failed"):  # unsigned request
        SamplerClient(in_process_server.address, secret=None, timeout_s=10)


def test_exposed_address_requires_a_secret():
    eng = SamplingEngine(get_model_config("tiny"), init_params(get_model_config("tiny"), jax.random.PRNGKey(0)),
                         max_batch=1, max_prompt_len=8, max_new_tokens=4)
    with pytest.raises(ValueError, match="not a loopback address.*secret"):
        SamplerServer(eng, "0.0.0.0", 0, secret=None)


def _tiny_engine():
    cfg = get_model_config("tiny")
    return SamplingEngine(cfg, init_params(cfg, jax.random.PRNGKey(0)), max_batch=4, max_prompt_len=16,
                          max_new_tokens=8)


@pytest.fixture(scope="module")
def open_server():
    """A SamplerServer without a secret (loopback, manual runs) on a thread."""
    server = SamplerServer(_tiny_engine(), "127.0.0.1", 0, idle_timeout_s=0.5)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join(timeout=60)
    assert not thread.is_alive()


def _connect(server, secret=None):
    s = socket.create_connection(server.address, timeout=60)  # the timeout is a hang guard only
    return protocol.Channel.connect(s, secret)


def _raw(header: bytes, body: bytes = b"", declared_body: int | None = None) -> bytes:
    n = len(body) if declared_body is None else declared_body
    return protocol._PREFIX.pack(protocol.MAGIC, len(header), n, bytes(32), bytes(32)) + header + body


def _ping_works(server, secret=None) -> None:
    channel = _connect(server, secret)
    with channel.sock:
        channel.send("ping")
        assert channel.recv().type == "pong"


@pytest.mark.parametrize("name", sorted(HOSTILE_HEADERS))
def test_hostile_frames_get_an_error_reply_and_the_server_stays_up(open_server, name):
    channel = _connect(open_server)
    with channel.sock:
        channel.sock.sendall(_raw(HOSTILE_HEADERS[name]))
        reply = channel.recv()
    assert reply.type == "error" and reply.fields["code"] == "bad_request", reply.fields
    _ping_works(open_server)


def test_a_stalled_peer_does_not_block_other_clients(open_server):
    with socket.create_connection(open_server.address, timeout=60) as stalled:
        stalled.sendall(b"SWRL\0\0")  # half a prefix, then nothing
        client = SamplerClient(open_server.address, timeout_s=60)  # connects and pings
        assert client.generate([[1, 2]], GREEDY)[0][0].completion_length == 8
        client.close()


def test_an_idle_connection_is_closed_and_the_client_reconnects(open_server):
    client = SamplerClient(open_server.address, timeout_s=60)
    sock = client._sock
    sock.settimeout(60)  # hang guard: wait for the server's idle timeout (0.5 s) to close the connection
    assert sock.recv(1, socket.MSG_PEEK) == b""
    assert client.ping()["policy_version"] == 0 and client._sock is not sock
    client.close()


def test_large_declared_body_is_refused_before_it_is_read(open_server, in_process_server):
    channel = _connect(open_server)  # no secret: the size limit (64 MiB) applies before reading
    with channel.sock:
        channel.sock.sendall(_raw(b"{}", declared_body=512 << 20))
        reply = channel.recv()
    assert reply.fields["code"] == "too_large", reply.fields
    channel = _connect(in_process_server)  # with a secret: the declared lengths fail authentication
    with channel.sock:
        channel.sock.sendall(_raw(b"{}", declared_body=(1 << 30) - 1))
        reply = channel.recv()
    assert reply.fields["code"] == "auth", reply.fields
    _ping_works(in_process_server, b"sesame")


def test_replayed_frames_and_unauthenticated_shutdown_are_refused(open_server, in_process_server):
    channel = _connect(in_process_server, b"sesame")
    with channel.sock:
        ping = channel.frame("ping")
        channel.sock.sendall(ping)
        assert channel.recv().type == "pong"
        channel.sock.sendall(ping)
        assert channel.recv().fields["code"] == "auth"
    stolen = _connect(in_process_server, b"sesame").frame("shutdown")  # captured, then sent on a new connection
    channel = _connect(in_process_server)
    with channel.sock:
        channel.sock.sendall(stolen)
        assert channel.recv().fields["code"] == "auth"
    _ping_works(in_process_server, b"sesame")
    channel = _connect(open_server)  # no secret configured: nobody may shut the server down
    with channel.sock:
        channel.send("shutdown")
        reply = channel.recv()
    assert reply.type == "error" and reply.fields["code"] == "auth" and "signal" in reply.fields["message"]
    _ping_works(open_server)


def test_kill_ends_a_request_waiting_for_a_version_at_once(tmp_path):
    """A stopping asynchronous run: its producer's request waits for a policy version nobody will publish. kill()
    from another thread ends it with a SamplerError (a client that started its server restarts nothing once
    stopping), not the server's timeout answer after `wait_timeout_s`."""
    server = SamplerServer(_tiny_engine(), "127.0.0.1", 0, weights_dir=str(tmp_path / "policy"))  # versions wait
    server_thread = threading.Thread(target=server.serve_forever, daemon=True)
    server_thread.start()
    client = SamplerClient(server.address, timeout_s=60)
    errors: list[BaseException] = []

    def wait_for_version():
        try:
            client.generate([[1, 2]], GREEDY, min_policy_version=5, wait_timeout_s=5)
        except (SamplerError, SamplerRequestError) as e:
            errors.append(e)

    thread = threading.Thread(target=wait_for_version)
    thread.start()
    client.kill()  # whether the request is in the server's wait yet or not sent: it ends now, not in 60 s
    thread.join(30)
    assert not thread.is_alive() and errors and "was stopped while a request was in flight" in str(errors[0])
    with pytest.raises(SamplerError, match="was stopped"):
        client.ping()
    server.shutdown()


def test_a_relative_weights_dir_is_the_current_directorys(tmp_path, monkeypatch):
    """Issue 46 item 9: `--weights_dir runs/X/policy` (relative) reached Orbax, which refuses relative paths: the
    server exited while starting."""
    from tests.conftest import REPO_ROOT

    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(JAX_CACHE))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    weights.publish(tmp_path / "runs" / "X" / "policy", init_params(get_model_config("tiny"), jax.random.PRNGKey(2)),
                    4)
    monkeypatch.chdir(tmp_path)  # the server process starts here too
    with SamplerClient(config_path=str(REPO_ROOT / "experiments" / "tiny_cpu.py"), overrides=OVERRIDES,
                       weights_dir="runs/X/policy", timeout_s=120, max_restarts=0, log_dir=str(tmp_path / "log")) as c:
        assert c.ping()["policy_version"] == 4


def test_partial_rollouts_server_takes_a_version_published_mid_request(tmp_path):
    """sampler.partial_rollouts: the config's engine is the continuous one; the server hands it its weight watcher,
    so a version published while a request decodes is taken between two segments, and the result carries each
    token's version over the wire."""
    from experiments import base
    from swerl_jax.sampler.continuous import ContinuousEngine
    from swerl_jax.sampler.factory import load_engine

    c = base.get_config()
    c.model.name, c.sampler.max_new_tokens, c.data.max_prompt_len, c.sampler.max_batch = "tiny", 16, 32, 4
    c.sampler.partial_rollouts, c.sampler.partial_segment = True, 4
    engine, _ = load_engine(c, with_tokenizer=False)
    assert isinstance(engine, ContinuousEngine) and engine.partial_rollouts and engine.segment == 4
    policy = tmp_path / "policy"
    weights.publish(policy, engine.params, 0)
    server = SamplerServer(engine, "127.0.0.1", 0, secret=b"sesame", weights_dir=str(policy))
    try:
        assert engine.weight_source == server.watcher.poll
        watch, published = engine.weight_source, []

        def publish_then_poll():  # the trainer publishes version 1 after the request's first segment
            if not published:
                published.append(weights.publish(policy, init_params(engine.config, jax.random.PRNGKey(9)), 1))
            return watch()
        engine.weight_source = publish_then_poll
        fields, arrays = protocol.generate_request(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=12,
                                                                           stop_token_ids=()), 1, 0, 0)
        kind, fields, arrays = server.handle(protocol.decode(*protocol.encode_parts("generate", fields, arrays)))
        assert kind == "result", fields
        got = protocol.parse_result(protocol.decode(*protocol.encode_parts(kind, fields, arrays)))
        assert [g[0].token_versions.tolist() for g in got] == [[0] * 4 + [1] * 8] * 2
        assert [g[0].policy_version for g in got] == [0, 0] and engine.policy_version == 1
    finally:
        server.shutdown()
