"""Red team (issue 30, item 10): peers that never authenticate cannot starve the sampler's real clients.

Before the fix, 16 idle TCP connections took every connection slot, each for `frame_timeout_s` (60 s): an
authenticated ping waited in the listen backlog until one of them timed out. Now connections that have not
delivered a valid first message are a separate, bounded pool (the oldest is evicted when it is full) with a
short handshake timeout, and only authenticated connections take the `max_connections` slots.

Every timeout below is a hang guard, never a speed check: what must happen at once is what the server does
on arrival (admit, evict, answer), and the old server cannot do it before the guard by construction (its idle
peers hold their slots for 600 s, ten times the guard).
"""

from __future__ import annotations

import contextlib
import socket
import threading

import jax
import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.sampler import protocol
from swerl_jax.sampler.engine import SamplingEngine
from swerl_jax.sampler.server import SamplerServer
from tests.reward.helpers import wait_until

SECRET = b"sesame"
GUARD_S = 60.0  # hang guard for anything the server does on arrival
LONG_S = 600.0  # frame / idle timeouts the idle peers could otherwise hide behind


@pytest.fixture(scope="module")
def engine():
    cfg = get_model_config("tiny")
    return SamplingEngine(cfg, init_params(cfg, jax.random.PRNGKey(0)), max_batch=2, max_prompt_len=8,
                          max_new_tokens=4)


@contextlib.contextmanager
def running(engine, **kwargs):
    """A SamplerServer with a shared secret on a thread (loopback, port 0), shut down afterwards."""
    server = SamplerServer(engine, "127.0.0.1", 0, secret=SECRET, **kwargs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(timeout=GUARD_S)
        assert not thread.is_alive()


def _ping(server, timeout_s: float = GUARD_S) -> dict:
    """An authenticated ping on a new connection; its pong's fields (socket timeout: a hang guard)."""
    with socket.create_connection(server.address, timeout=timeout_s) as sock:
        channel = protocol.Channel.connect(sock, SECRET)
        channel.send("ping")
        reply = channel.recv()
    assert reply.type == "pong", reply.fields
    return reply.fields


def _closed_by_server(sock: socket.socket) -> bool:
    """Read until the server closes the connection (True) or the guard expires (socket.timeout)."""
    sock.settimeout(GUARD_S)
    while chunk := sock.recv(4096):  # the greeting first, then the end of the stream
        del chunk
    return True


def test_idle_unauthenticated_connections_do_not_delay_an_authenticated_ping(engine):
    # Only pre-fix constructor arguments: 4 slots and 600 s frame/idle timeouts. The old server accepts 4 idle
    # peers, which hold every slot for 600 s, and leaves the ping's connection in the backlog past the guard.
    with running(engine, max_connections=4, frame_timeout_s=LONG_S, idle_timeout_s=LONG_S) as server:
        idle = [socket.create_connection(server.address, timeout=GUARD_S) for _ in range(64)]
        try:
            assert _ping(server, timeout_s=30.0)["max_batch"] == 2
            assert _ping(server, timeout_s=30.0)["max_batch"] == 2  # and again: the server keeps serving
        finally:
            for sock in idle:
                sock.close()


def test_the_oldest_pending_connection_is_evicted_when_the_pool_is_full(engine):
    with running(engine, max_connections=2, max_pending=8, handshake_timeout_s=LONG_S,
                 frame_timeout_s=LONG_S, idle_timeout_s=LONG_S) as server:
        idle = []
        try:
            for _ in range(8):
                sock = socket.create_connection(server.address, timeout=GUARD_S)
                assert len(sock.recv(40, socket.MSG_WAITALL)) == 40  # the greeting: accepted and pending
                idle.append(sock)
            wait_until(lambda: server.admission.pending == 8, "8 pending connections", GUARD_S)
            # The handshake timeout is 600 s: only the eviction can close the oldest connection now.
            newcomer = socket.create_connection(server.address, timeout=GUARD_S)
            idle.append(newcomer)
            assert _closed_by_server(idle[0])
            assert server.admission.pending == 8
            assert _ping(server)["policy_version"] == 0  # its connection evicted the next oldest
            assert _closed_by_server(idle[1])
            assert server.admission.pending <= 8 and server.admission.active <= 2
        finally:
            for sock in idle:
                sock.close()


def test_a_silent_connection_is_dropped_after_the_handshake_timeout(engine):
    with running(engine, handshake_timeout_s=0.5, frame_timeout_s=LONG_S, idle_timeout_s=LONG_S) as server:
        with socket.create_connection(server.address, timeout=GUARD_S) as sock:
            assert _closed_by_server(sock)  # 0.5 s, not the 600 s frame or idle timeout
        wait_until(lambda: server.admission.pending == 0, "the dropped connection released", GUARD_S)
        assert _ping(server)["policy_version"] == 0


def test_a_connection_that_sends_garbage_gets_an_error_and_is_dropped(engine):
    with running(engine, frame_timeout_s=LONG_S, idle_timeout_s=LONG_S) as server:
        with socket.create_connection(server.address, timeout=GUARD_S) as sock:
            channel = protocol.Channel.connect(sock, SECRET)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: sampler\r\n\r\n" + b"x" * 100)
            reply = channel.recv()
            assert reply.type == "error" and reply.fields["code"] == "bad_request", reply.fields
            assert "bad magic" in reply.fields["message"]
            assert _closed_by_server(sock)
        with socket.create_connection(server.address, timeout=GUARD_S) as sock:  # a forged MAC
            channel = protocol.Channel.connect(sock, b"guess")
            channel.send("ping")
            with pytest.raises(protocol.ProtocolError, match="authentication failed"):
                channel.recv()  # the server's error reply, signed with the real secret
            assert _closed_by_server(sock)
        wait_until(lambda: server.admission.pending == 0, "both connections released", GUARD_S)
        assert _ping(server)["policy_version"] == 0
        wait_until(lambda: server.admission.active == 0, "the ping's connection released", GUARD_S)


def test_authenticated_clients_still_share_max_connections(engine):
    # One slot: a second authenticated client waits (pending) until the first leaves, then gets its answer.
    with running(engine, max_connections=1, frame_timeout_s=LONG_S, idle_timeout_s=LONG_S) as server:
        first = socket.create_connection(server.address, timeout=GUARD_S)
        ch1 = protocol.Channel.connect(first, SECRET)
        ch1.send("ping")
        assert ch1.recv().type == "pong"
        with socket.create_connection(server.address, timeout=GUARD_S) as second:
            ch2 = protocol.Channel.connect(second, SECRET)
            ch2.send("ping")
            wait_until(lambda: server.admission.pending == 1, "the second client waiting for a slot", GUARD_S)
            assert server.admission.active == 1
            first.close()  # frees the slot
            assert ch2.recv().type == "pong"
            assert server.admission.active == 1 and server.admission.pending == 0


def test_bad_pool_sizes_are_refused(engine):
    with pytest.raises(ValueError, match="max_pending=0"):
        SamplerServer(engine, "127.0.0.1", 0, max_pending=0)
    with pytest.raises(ValueError, match="handshake_timeout_s=0"):
        SamplerServer(engine, "127.0.0.1", 0, handshake_timeout_s=0)


def test_peers_that_ping_once_and_idle_do_not_block_a_client_of_a_server_without_secret(engine):
    # Issue 45 (defect 8): without a secret a first message proves nothing, so 16 peers that ping once and then idle
    # took all 16 active slots for idle_timeout_s (600 s) and a client waited that long. Only pre-fix constructor
    # arguments; the client's wait is bounded by the server's idle timeout (asserted short next to the hang guard).
    server = SamplerServer(engine, "127.0.0.1", 0, secret=None, max_connections=16, frame_timeout_s=LONG_S,
                           idle_timeout_s=LONG_S)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    idle = []
    try:
        for _ in range(16):
            sock = socket.create_connection(server.address, timeout=GUARD_S)
            channel = protocol.Channel.connect(sock, None)
            channel.send("ping")
            assert channel.recv().type == "pong"
            idle.append(sock)
        assert server.admission.active == 16
        # the idle peers' hold on the slots is what bounds the client's wait: it must be short next to the guard
        assert server.idle_timeout_s < GUARD_S / 4, f"idle peers hold the slots for {server.idle_timeout_s} s"
        with socket.create_connection(server.address, timeout=GUARD_S) as sock:
            channel = protocol.Channel.connect(sock, None)
            channel.send("ping")
            assert channel.recv().type == "pong"  # a slot was freed by an idle peer timing out
        assert all(_closed_by_server(sock) for sock in idle)
    finally:
        for sock in idle:
            sock.close()
        server.shutdown()
        thread.join(timeout=GUARD_S)
