"""Wire format: round trips, HMAC, and clear errors for malformed messages."""

from __future__ import annotations

import json
import socket
import struct

import numpy as np
import pytest

from swerl_jax.sampler import protocol
from swerl_jax.sampler.engine import Completion, SamplingParams


def _split(frame: bytes) -> tuple[bytes, bytes, bytes]:
    n = protocol._PREFIX.size
    _, hlen, blen, _ = protocol._PREFIX.unpack(frame[:n])
    return frame[:n], frame[n:n + hlen], frame[n + hlen:n + hlen + blen]


def test_round_trip_arrays_and_fields_over_a_socket():
    a, b = socket.socketpair()
    arrays = {"x": np.arange(7, dtype=np.int32), "y": np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)}
    protocol.send(a, "hello", {"k": [1, "two"]}, arrays, secret=b"s3")
    msg = protocol.recv(b, secret=b"s3")
    assert msg.type == "hello" and msg.fields == {"k": [1, "two"]}
    np.testing.assert_array_equal(msg.arrays["x"], arrays["x"])
    np.testing.assert_array_equal(msg.arrays["y"], arrays["y"])
    a.close()
    with pytest.raises(protocol.ConnectionClosed):
        protocol.recv(b)


def test_little_endian_layout_is_explicit():
    frame = protocol.encode("t", {}, {"x": np.array([1, 256], np.int32)})
    _, header, body = _split(frame)
    assert json.loads(header)["arrays"] == [{"name": "x", "dtype": "<i4", "shape": [2]}]
    assert body == struct.pack("<2i", 1, 256)


def test_wrong_secret_and_tampering_fail_authentication():
    prefix, header, body = _split(protocol.encode("t", {"a": 1}, {}, secret=b"right"))
    with pytest.raises(protocol.ProtocolError, match="authentication"):
        protocol.decode(prefix, header, body, b"wrong")
    with pytest.raises(protocol.ProtocolError, match="authentication"):
        protocol.decode(prefix, header.replace(b'"a": 1', b'"a": 2'), body, b"right")
    with pytest.raises(protocol.ProtocolError, match="authentication"):  # no MAC at all
        protocol.decode(*_split(protocol.encode("t", {}, {})), b"right")


@pytest.mark.parametrize("header,body,match", [
    (b"not json", b"", "valid JSON"),
    (b'{"v": 99, "type": "ping", "arrays": []}', b"", "protocol version"),
    (b'{"v": 1, "arrays": []}', b"", "'type'"),
    (b'{"v": 1, "type": "t", "arrays": [{"name": "x", "dtype": "<f8", "shape": [1]}]}', b"\0" * 8, "dtype"),
    (b'{"v": 1, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [4]}]}', b"\0" * 8, "past the end"),
    (b'{"v": 1, "type": "t", "arrays": []}', b"\0" * 4, "not described"),
])
def test_malformed_messages_get_clear_errors(header, body, match):
    prefix = protocol._PREFIX.pack(protocol.MAGIC, len(header), len(body), bytes(32))
    with pytest.raises(protocol.ProtocolError, match=match):
        protocol.decode(prefix, header, body, None)


HOSTILE_HEADERS = {  # each one killed the server: decode caught only JSON errors
    "5000-digit int": b'{"v": 1, "type": "ping", "n": ' + b"9" * 5000 + b', "arrays": []}',
    "100k-deep JSON": b"[" * 100_000 + b"]" * 100_000,
    "shape 2^32 x 2^32": b'{"v": 1, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [4294967296, '
                         b'4294967296]}]}',
    "shape 2^64": b'{"v": 1, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [18446744073709551616]}]}',
    "shape -1": b'{"v": 1, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [-1]}]}',
    "64 dims": b'{"v": 1, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [' + b", ".join([b"0"] * 64)
               + b"]}]}",
    "bool dim": b'{"v": 1, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [true]}]}',
    "twice the same array": b'{"v": 1, "type": "t", "arrays": [{"name": "x", "dtype": "<i4", "shape": [0]}, '
                            b'{"name": "x", "dtype": "<i4", "shape": [0]}]}',
    "NaN": b'{"v": 1, "type": "t", "w": NaN, "arrays": []}',
    "not UTF-8": b'{"v": 1, "type": "\xff\xfe", "arrays": []}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_HEADERS))
def test_hostile_headers_raise_protocol_errors(name):
    header = HOSTILE_HEADERS[name]
    prefix = protocol._PREFIX.pack(protocol.MAGIC, len(header), 0, bytes(32))
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(prefix, header, b"", None)


def test_bad_magic_and_oversized_frames_are_refused_before_reading_them():
    a, b = socket.socketpair()
    a.sendall(protocol._PREFIX.pack(b"HTTP", 0, 0, bytes(32)))
    with pytest.raises(protocol.ProtocolError, match="magic"):
        protocol.recv(b)
    a.sendall(protocol._PREFIX.pack(protocol.MAGIC, 10, 1 << 40, bytes(32)))
    with pytest.raises(protocol.ProtocolError, match="too large"):
        protocol.recv(b)


def test_generate_request_round_trip_and_field_validation():
    sp = SamplingParams(temperature=0.5, top_p=0.9, top_k=3, max_new_tokens=7, stop_strings=("\n\n",),
                        stop_token_ids=(2,))
    fields, arrays = protocol.generate_request([[1, 2, 3], [4]], sp, num_samples=2, seed=9, min_policy_version=3)
    req = protocol.parse_generate(protocol.decode(*_split(protocol.encode("generate", fields, arrays)), None))
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
    back = protocol.parse_result(protocol.decode(*_split(protocol.encode("result", fields, arrays)), None))
    for g, h in zip(groups, back):
        for c, d in zip(g, h):
            assert (c.prompt_index, c.sample_index, c.text, c.finish_reason, c.policy_version) == \
                   (d.prompt_index, d.sample_index, d.text, d.finish_reason, d.policy_version)
            np.testing.assert_array_equal(c.tokens, d.tokens)
            np.testing.assert_array_equal(c.logprobs, d.logprobs)
