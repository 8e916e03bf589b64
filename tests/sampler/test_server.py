"""The sampler process: requests, weight versions, errors, a killed and a hung server, authentication."""

from __future__ import annotations

import os
import signal
import socket
import threading

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


@pytest.fixture()
def in_process_server():
    """A SamplerServer with a shared secret on a thread (loopback, port 0)."""
    eng = SamplingEngine(get_model_config("tiny"), init_params(get_model_config("tiny"), jax.random.PRNGKey(0)),
                         max_batch=4, max_prompt_len=16, max_new_tokens=8)
    server = SamplerServer(eng, "127.0.0.1", 0, secret=b"sesame")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    import socket
    with socket.create_connection(server.address) as s:
        protocol.send(s, "shutdown", {}, {}, secret=b"sesame")
        protocol.recv(s, b"sesame")
    thread.join(timeout=10)


def test_shared_secret_is_checked(in_process_server):
    good = SamplerClient(in_process_server.address, secret=b"sesame", timeout_s=60)
    assert good.generate([[1, 2]], GREEDY)[0][0].completion_length == 8
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
    server = SamplerServer(_tiny_engine(), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    with socket.create_connection(server.address, timeout=60) as s:
        protocol.send(s, "shutdown", {}, {})
        protocol.recv(s)
    thread.join(timeout=60)


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return protocol._PREFIX.pack(protocol.MAGIC, len(header), len(body), bytes(32)) + header + body


@pytest.mark.parametrize("name", sorted(HOSTILE_HEADERS))
def test_hostile_frames_get_an_error_reply_and_the_server_stays_up(open_server, name):
    with socket.create_connection(open_server.address, timeout=60) as s:  # timeout: a hang guard only
        s.sendall(_frame(HOSTILE_HEADERS[name]))
        reply = protocol.recv(s)
    assert reply.type == "error" and reply.fields["code"] == "bad_request", reply.fields
    with socket.create_connection(open_server.address, timeout=60) as s:
        protocol.send(s, "ping", {}, {})
        assert protocol.recv(s).type == "pong"
