"""Wire format: round trips, HMAC, and clear errors for malformed messages."""

from __future__ import annotations

import json
import socket
import struct

import numpy as np
import pytest

from swerl_jax.sampler import protocol
from swerl_jax.sampler.engine import Completion, SamplingParams


def _pair(secret=None, client_secret=None):
    """(server channel, client channel) over a socketpair, greeting exchanged."""
    a, b = socket.socketpair()
    server = protocol.Channel.accept(a, secret)
    return server, protocol.Channel.connect(b, secret if client_secret is None else client_secret)


def _raw(header: bytes, body: bytes = b"") -> bytes:
    """An unauthenticated frame (zero MACs) with exactly these bytes."""
    return protocol._PREFIX.pack(protocol.MAGIC, len(header), len(body), bytes(32), bytes(32)) + header + body


def test_round_trip_arrays_and_fields_over_a_socket():
    server, client = _pair(b"s3")
    arrays = {"x": np.arange(7, dtype=np.int32), "y": np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)}
    for _ in range(2):  # both directions, twice: the counters advance in step
        client.send("hello", {"k": [1, "two"]}, arrays)
        msg = server.recv()
        assert msg.type == "hello" and msg.fields == {"k": [1, "two"]}
        np.testing.assert_array_equal(msg.arrays["x"], arrays["x"])
        np.testing.assert_array_equal(msg.arrays["y"], arrays["y"])
        server.send("back", {}, {"z": np.ones(3, np.float32)})
        assert client.recv().type == "back"
    client.sock.close()
    with pytest.raises(protocol.ConnectionClosed):
        server.recv()


def test_little_endian_layout_is_explicit():
    header, body = protocol.encode_parts("t", {}, {"x": np.array([1, 256], np.int32)})
    assert json.loads(header)["arrays"] == [{"name": "x", "dtype": "<i4", "shape": [2]}]
    assert body == struct.pack("<2i", 1, 256)


def test_wrong_secret_tampering_and_replay_fail_authentication():
    server, client = _pair(b"right", client_secret=b"wrong")
    client.send("t", {"a": 1})
    with pytest.raises(protocol.ProtocolError, match="authentication") as e:
        server.recv()
    assert e.value.code == "auth"
    server, client = _pair(b"right")
    client.sock.sendall(client.frame("t", {"a": 1}).replace(b'"a": 1', b'"a": 2'))  # same lengths and MACs
    with pytest.raises(protocol.ProtocolError, match="body does not match"):
        server.recv()
    server, client = _pair(b"right")
    frame = client.frame("ping")
    client.sock.sendall(frame)
    assert server.recv().type == "ping"
    client.sock.sendall(frame)  # the same bytes again: the counter moved on
    with pytest.raises(protocol.ProtocolError, match="authentication"):
        server.recv()
    other_server, other_client = _pair(b"right")  # another connection: another nonce
    other_client.sock.sendall(frame)
    with pytest.raises(protocol.ProtocolError, match="authentication"):
        other_server.recv()
    server, client = _pair(b"right", client_secret=b"")  # no MAC at all
    client.send("t")
    with pytest.raises(protocol.ProtocolError, match="authentication"):
        server.recv()


def test_unauthenticated_lengths_are_refused_before_the_header_or_body_is_read():
    server, client = _pair(b"right")
    client.sock.sendall(protocol._PREFIX.pack(protocol.MAGIC, 100, 1 << 29, bytes(32), bytes(32)))  # prefix only
    with pytest.raises(protocol.ProtocolError, match="authentication"):
        server.recv(frame_timeout_s=60)  # a read of the body would wait for bytes that never come


@pytest.mark.parametrize("header,body,match", [
    (b"not json", b"", "valid JSON"),
    (b'{"v": 99, "type": "ping", "arrays": []}', b"", "protocol version"),
    (b'{"v": 2, "arrays": []}', b"", "'type'"),
    (b'{"v": 2, "type": "t", "arrays": [{"name": "x", "dtype": "<f8", "shape": [1]}]}', b"\0" * 8, "dtype"),
    (b'{"v": 2, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [4]}]}', b"\0" * 8, "past the end"),
    (b'{"v": 2, "type": "t", "arrays": []}', b"\0" * 4, "not described"),
])
def test_malformed_messages_get_clear_errors(header, body, match):
    with pytest.raises(protocol.ProtocolError, match=match):
        protocol.decode(header, body)


HOSTILE_HEADERS = {  # each one killed the server: decode caught only JSON errors
    "5000-digit int": b'{"v": 2, "type": "ping", "n": ' + b"9" * 5000 + b', "arrays": []}',
    "100k-deep JSON": b"[" * 100_000 + b"]" * 100_000,
    "shape 2^32 x 2^32": b'{"v": 2, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [4294967296, '
                         b'4294967296]}]}',
    "shape 2^64": b'{"v": 2, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [18446744073709551616]}]}',
    "shape -1": b'{"v": 2, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [-1]}]}',
    "64 dims": b'{"v": 2, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [' + b", ".join([b"0"] * 64)
               + b"]}]}",
    "bool dim": b'{"v": 2, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [true]}]}',
    "twice the same array": b'{"v": 2, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [0]}, '
                            b'{"name": "x", "dtype": "<i4", "shape": [0]}]}',
    "NaN": b'{"v": 2, "type": "t", "w": NaN, "arrays": []}',
    "not UTF-8": b'{"v": 2, "type": "\xff\xfe", "arrays": []}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_HEADERS))
def test_hostile_headers_raise_protocol_errors(name):
    header = HOSTILE_HEADERS[name]
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(header, b"")


def test_bad_magic_oversized_and_stalled_frames_are_refused_before_reading_them():
    server, client = _pair()
    client.sock.sendall(protocol._PREFIX.pack(b"HTTP", 0, 0, bytes(32), bytes(32)))
    with pytest.raises(protocol.ProtocolError, match="magic"):
        server.recv()
    server, client = _pair()
    client.sock.sendall(protocol._PREFIX.pack(protocol.MAGIC, 10, 1 << 40, bytes(32), bytes(32)))
    with pytest.raises(protocol.ProtocolError, match="too large") as e:
        server.recv(frame_timeout_s=60)
    assert e.value.code == "too_large"
    server, client = _pair()
    client.sock.sendall(b"SWRL\0\0")  # half a prefix, then nothing
    with pytest.raises(protocol.ProtocolError, match="not received in time") as e:
        server.recv(frame_timeout_s=0.2)
    assert e.value.code == "timeout"
    with pytest.raises(protocol.IdleTimeout):  # nothing at all
        server.recv(idle_timeout_s=0.2, frame_timeout_s=60)


def test_generate_request_round_trip_and_field_validation():
    sp = SamplingParams(temperature=0.5, top_p=0.9, top_k=3, max_new_tokens=7, stop_strings=("\n\n",),
                        stop_token_ids=(2,))
    fields, arrays = protocol.generate_request([[1, 2, 3], [4]], sp, num_samples=2, seed=9, min_policy_version=3)
    req = protocol.parse_generate(protocol.decode(*protocol.encode_parts("generate", fields, arrays)))
    assert req.sampling == sp and req.num_samples == 2 and req.seed == 9 and req.min_policy_version == 3
    assert [p.tolist() for p in req.prompts] == [[1, 2, 3], [4]]
    bad = dict(fields, sampling=dict(fields["sampling"], top_k="3"))
    with pytest.raises(protocol.ProtocolError, match="sampling.top_k must be int"):
        protocol.parse_generate(protocol.Message("generate", bad, arrays))
    bad = dict(fields, sampling=dict(fields["sampling"], temperature=-1))
    with pytest.raises(protocol.ProtocolError, match="temperature"):
        protocol.parse_generate(protocol.Message("generate", bad, arrays))
    with pytest.raises(protocol.ProtocolError, match="add up"):
        protocol.parse_generate(protocol.Message("generate", fields, dict(arrays, prompt_lengths=np.array(
            [3, 2], np.int32))))
    with pytest.raises(protocol.ProtocolError, match="num_samples"):
        protocol.parse_generate(protocol.Message("generate", dict(fields, num_samples=0), arrays))


def test_result_round_trip():
    groups = [[Completion(i, j, np.arange(i + j + 1, dtype=np.int32), -np.arange(i + j + 1, dtype=np.float32),
                          f"t{i}{j}", "stop" if j else "length", 5, i + j + 1, 4) for j in range(2)] for i in range(3)]
    fields, arrays = protocol.result_message(groups, 4)
    back = protocol.parse_result(protocol.decode(*protocol.encode_parts("result", fields, arrays)))
    for g, h in zip(groups, back):
        for c, d in zip(g, h):
            assert (c.prompt_index, c.sample_index, c.text, c.finish_reason, c.policy_version) == \
                   (d.prompt_index, d.sample_index, d.text, d.finish_reason, d.policy_version)
            np.testing.assert_array_equal(c.tokens, d.tokens)
            np.testing.assert_array_equal(c.logprobs, d.logprobs)


def test_prompt_offset_is_optional_validated_and_echoed():
    sp = SamplingParams(max_new_tokens=4)
    fields, arrays = protocol.generate_request([[1, 2], [3]], sp, prompt_offset=5)
    assert protocol.parse_generate(protocol.Message("generate", fields, arrays)).prompt_offset == 5
    old = {k: v for k, v in fields.items() if k != "prompt_offset"}  # a client from before prompt_offset
    assert protocol.parse_generate(protocol.Message("generate", old, arrays)).prompt_offset == 0
    for bad in (-1, 1.5, "2", True, None):
        with pytest.raises(protocol.ProtocolError, match="generate.prompt_offset"):
            protocol.parse_generate(protocol.Message("generate", dict(fields, prompt_offset=bad), arrays))
    # the result carries the offset: prompt indices come back as the server numbered them
    groups = [[Completion(5 + i, 0, np.arange(2, dtype=np.int32), np.zeros(2, np.float32), "", "length", 2, 2, 0)]
              for i in range(2)]
    back = protocol.parse_result(protocol.decode(*protocol.encode_parts("result", *protocol.result_message(groups, 0))))
    assert [g[0].prompt_index for g in back] == [5, 6]


def test_result_carries_partial_rollouts_token_versions():
    """A partial rollout's per-token versions and its own (oldest) version cross the wire; without them the
    message has no such arrays (today's result)."""
    plain = [[Completion(0, 0, np.arange(3, dtype=np.int32), np.zeros(3, np.float32), "t", "stop", 2, 3, 5)]]
    assert set(protocol.result_message(plain, 5)[1]) == {"tokens", "logprobs", "completion_lengths"}
    groups = [[Completion(0, j, np.arange(j + 2, dtype=np.int32), np.zeros(j + 2, np.float32), "t", "stop", 2, j + 2,
                          4 + j, token_versions=np.asarray([4 + j] + [6] * (j + 1), np.int32)) for j in range(2)]]
    fields, arrays = protocol.result_message(groups, 6)
    back = protocol.parse_result(protocol.decode(*protocol.encode_parts("result", fields, arrays)))
    assert [c.policy_version for c in back[0]] == [4, 5]
    assert [c.token_versions.tolist() for c in back[0]] == [[4, 6], [5, 6, 6]]
    arrays["token_versions"] = arrays["token_versions"][:-1]
    with pytest.raises(ValueError, match="token_versions has 4 entries for 5 tokens"):
        protocol.parse_result(protocol.decode(*protocol.encode_parts("result", fields, arrays)))
