"""The trainer <-> sampler wire format: a JSON header plus raw little-endian arrays; no pickle.

On accept the server sends a greeting:  b"SWRL" | version u32 BE | nonce 32 random bytes (new per connection).
Then each message is a frame:
    b"SWRL" | header_len u32 BE | body_len u64 BE | prefix_mac 32 | frame_mac 32 | header (UTF-8 JSON) | body

The header is `{"v": PROTOCOL_VERSION, "type": ..., <fields>, "arrays": [{"name", "dtype", "shape"}, ...]}` and
the body is those arrays' bytes back to back (dtypes "<i4" and "<f4" only).

Authentication (when a shared secret is configured; both MACs are zeros otherwise), HMAC-SHA256 with the secret:
  context    = direction (b"C" client->server, b"S" server->client) | nonce | counter u64 BE
               (counter = how many frames this connection carried in that direction before this one)
  prefix_mac = HMAC(b"prefix" | context | magic | header_len | body_len)
  frame_mac  = HMAC(b"frame" | prefix_mac | header | body)
The receiver checks prefix_mac right after the 80-byte prefix, so a peer without the secret can make it read and
allocate nothing more (the declared lengths are authenticated before a byte of header or body is read). The
nonce and counter make every MAC single-use: a captured frame replayed on the same connection (wrong counter) or
another connection (wrong nonce) fails authentication; so does a reordered or truncated stream.
Without a secret (loopback only, manual runs) nothing is authenticated, and the server refuses `shutdown`:
stop such a server with a signal (or, when SamplerClient started it, by ending the parent process).

Message types:
  ping            -> pong {policy_version, pid, max_prompt_len, max_new_tokens, max_batch, activity}
  generate        {sampling, num_samples, seed, min_policy_version, wait_timeout_s[, prompt_offset]}
                  arrays prompt_tokens (all prompts concatenated), prompt_lengths
                  -> result {policy_version, texts, finish_reasons, prompt_lengths, prompt_offset}
                     arrays tokens, logprobs (all completions concatenated, prompt-major), completion_lengths
                     [, token_versions (likewise), policy_versions (one per completion): partial rollouts]
                  prompt_offset (absent: 0): prompt i is prompt prompt_offset + i of a larger request, for its
                  random keys and its completions' prompt_index (a request split across servers samples what the
                  whole would); the result echoes it, so a client sees a server that ignored it.
  shutdown        -> bye (only with a secret)
  any             -> error {code: bad_request|too_large|auth|timeout|internal, message}
After an error about the frame itself (bad framing, authentication, size, timeout) the server closes the
connection: the stream position is unknown.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
import os
import socket
import struct
import time

import numpy as np

from swerl_jax.sampler.types import Completion, SamplingParams

PROTOCOL_VERSION = 2
MAGIC = b"SWRL"
_PREFIX = struct.Struct(">4sIQ32s32s")  # magic, header_len, body_len, prefix_mac, frame_mac
_LENGTHS = struct.Struct(">4sIQ")
_GREETING = struct.Struct(">4sI32s")  # magic, version, nonce
MAX_HEADER_BYTES = 16 << 20
MAX_BODY_BYTES = 1 << 30
MAX_ARRAYS = 16
MAX_NDIM = 8
DTYPES = {"<i4": np.dtype("<i4"), "<f4": np.dtype("<f4")}
ERROR_CODES = ("bad_request", "too_large", "auth", "timeout", "internal")


class ProtocolError(ValueError):
    """A malformed, oversized, unauthenticated, late or version-mismatched message; `code` is its error code."""

    def __init__(self, message: str, code: str = "bad_request") -> None:
        super().__init__(message)
        self.code = code


class ConnectionClosed(ConnectionError):
    """The peer closed the socket between messages."""


class IdleTimeout(ConnectionClosed):
    """No new message started within the receiver's idle timeout."""


@dataclasses.dataclass
class Message:
    """A decoded message: its type, JSON fields and named arrays."""

    type: str
    fields: dict
    arrays: dict[str, np.ndarray]


def encode_parts(msg_type: str, fields: dict | None = None, arrays: dict[str, np.ndarray] | None = None
                 ) -> tuple[bytes, bytes]:
    """(header, body) of one message."""
    specs, chunks = [], []
    for name, arr in (arrays or {}).items():
        arr = np.asarray(arr)
        dt = {"i": "<i4", "u": "<i4", "b": "<i4", "f": "<f4"}.get(arr.dtype.kind)
        if dt is None:
            raise ProtocolError(f"array {name!r} has unsupported dtype {arr.dtype}")
        arr = np.ascontiguousarray(arr, DTYPES[dt])
        specs.append({"name": name, "dtype": dt, "shape": list(arr.shape)})
        chunks.append(arr.tobytes())
    header = json.dumps({"v": PROTOCOL_VERSION, "type": msg_type, **(fields or {}), "arrays": specs}).encode()
    return header, b"".join(chunks)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytearray:
    """n bytes, grown as they arrive (a declared length allocates nothing up front); `deadline` bounds the wait."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            sock.settimeout(max(deadline - time.monotonic(), 1e-3))
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except TimeoutError as e:
            if deadline is None:
                raise
            raise ProtocolError(f"message not received in time ({len(buf)} of {n} bytes)", "timeout") from e
        if not chunk:
            raise ProtocolError(f"connection closed mid-message ({len(buf)} of {n} bytes)")
        buf += chunk
    return buf


def _no_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def _check_spec(spec) -> tuple[str, list[int]]:
    """(name, shape) of a valid array spec, else ProtocolError."""
    shape = spec.get("shape") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or spec.get("dtype") not in DTYPES or not isinstance(spec.get("name"), str) \
            or not isinstance(shape, list) or len(shape) > MAX_NDIM \
            or not all(type(d) is int and d >= 0 for d in shape):
        raise ProtocolError(f"bad array spec {str(spec)[:200]}: need name, dtype in {sorted(DTYPES)}, and a shape "
                            f"of at most {MAX_NDIM} non-negative ints")
    return spec["name"], shape


def decode(header: bytes, body: bytes) -> Message:
    """Check the version and array specs, and build the Message (authentication is the Channel's job)."""
    try:  # ValueError covers bad JSON, bad UTF-8 and over-long integers; RecursionError very deep nesting
        fields = json.loads(header, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"header is not valid JSON: {str(e)[:200]}") from e
    if not isinstance(fields, dict):
        raise ProtocolError("header must be a JSON object")
    if fields.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {str(fields.get('v'))[:20]!r} is not {PROTOCOL_VERSION}")
    msg_type = fields.pop("type", None)
    if not isinstance(msg_type, str):
        raise ProtocolError("header field 'type' is missing or not a string")
    specs = fields.pop("arrays", [])
    fields.pop("v")
    if not isinstance(specs, list) or len(specs) > MAX_ARRAYS:
        raise ProtocolError(f"header field 'arrays' must be a list of at most {MAX_ARRAYS} array specs")
    arrays, offset = {}, 0
    for spec in specs:
        name, shape = _check_spec(spec)
        if name in arrays:
            raise ProtocolError(f"array {name!r} appears twice in the header")
        dt = DTYPES[spec["dtype"]]
        nbytes = math.prod(shape) * dt.itemsize  # Python ints: no overflow, whatever the shape claims
        if nbytes > len(body) - offset:
            raise ProtocolError(f"array {name!r} ({shape}) runs past the end of the body ({len(body)} B)")
        arrays[name] = np.frombuffer(body, dt, nbytes // dt.itemsize, offset).reshape(shape)
        offset += nbytes
    if offset != len(body):
        raise ProtocolError(f"body has {len(body) - offset} bytes not described by the array specs")
    return Message(msg_type, fields, arrays)


class Channel:
    """One connection's framing and authentication (see the module docstring): nonce, direction, counters."""

    def __init__(self, sock: socket.socket, secret: bytes | None, nonce: bytes, is_server: bool) -> None:
        self.sock, self.secret, self.nonce = sock, secret or None, nonce
        self._out, self._in = (b"S", b"C") if is_server else (b"C", b"S")
        self.sent = self.received = 0

    @classmethod
    def accept(cls, sock: socket.socket, secret: bytes | None) -> Channel:
        """Server side: send the greeting with a fresh random nonce."""
        nonce = os.urandom(32)
        sock.sendall(_GREETING.pack(MAGIC, PROTOCOL_VERSION, nonce))
        return cls(sock, secret, nonce, is_server=True)

    @classmethod
    def connect(cls, sock: socket.socket, secret: bytes | None) -> Channel:
        """Client side: read the server's greeting (the socket's timeout bounds the wait)."""
        greeting = sock.recv(_GREETING.size, socket.MSG_WAITALL)
        if len(greeting) < _GREETING.size:
            raise ConnectionClosed(f"the server closed the connection during the greeting ({len(greeting)} B)")
        magic, version, nonce = _GREETING.unpack(greeting)
        if magic != MAGIC or version != PROTOCOL_VERSION:
            raise ProtocolError(f"not a swerl_jax sampler of protocol version {PROTOCOL_VERSION} "
                                f"(greeting {magic!r}, version {version})")
        return cls(sock, secret, nonce, is_server=False)

    def _macs(self, direction: bytes, counter: int, header: bytes, body: bytes, lengths: bytes) -> tuple[bytes, bytes]:
        if not self.secret:
            return bytes(32), bytes(32)
        context = direction + self.nonce + counter.to_bytes(8, "big")
        prefix_mac = hmac.new(self.secret, b"prefix" + context + lengths, hashlib.sha256).digest()
        frame = hmac.new(self.secret, b"frame" + prefix_mac, hashlib.sha256)
        frame.update(header)
        frame.update(body)
        return prefix_mac, frame.digest()

    def frame(self, msg_type: str, fields: dict | None = None, arrays: dict | None = None) -> bytes:
        """The bytes of the next outgoing message (counts it as sent)."""
        header, body = encode_parts(msg_type, fields, arrays)
        lengths = _LENGTHS.pack(MAGIC, len(header), len(body))
        macs = self._macs(self._out, self.sent, header, body, lengths)
        self.sent += 1
        return lengths + macs[0] + macs[1] + header + body

    def send(self, msg_type: str, fields: dict | None = None, arrays: dict | None = None) -> None:
        """Encode and send one message."""
        self.sock.sendall(self.frame(msg_type, fields, arrays))

    def recv(self, max_header_bytes: int = MAX_HEADER_BYTES, max_body_bytes: int = MAX_BODY_BYTES,
             idle_timeout_s: float | None = None, frame_timeout_s: float | None = None) -> Message:
        """Receive one message.

        Raises ConnectionClosed at a clean end of stream, IdleTimeout when no message starts within
        `idle_timeout_s`, ProtocolError (with its error code) on a bad, unauthenticated, oversized or late frame.
        Without the timeouts the socket's own timeout applies (socket.timeout propagates).
        """
        if idle_timeout_s is not None:
            self.sock.settimeout(idle_timeout_s)
        try:
            first = self.sock.recv(1)
        except TimeoutError as e:
            if idle_timeout_s is None:
                raise
            raise IdleTimeout(f"no message within {idle_timeout_s:.0f}s") from e
        if not first:
            raise ConnectionClosed("peer closed the connection")
        deadline = None if frame_timeout_s is None else time.monotonic() + frame_timeout_s
        prefix = bytes(first + _recv_exact(self.sock, _PREFIX.size - 1, deadline))
        magic, header_len, body_len, prefix_mac, frame_mac = _PREFIX.unpack(prefix)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {magic!r}: not a swerl_jax sampler message")
        expected = self._macs(self._in, self.received, b"", b"", prefix[:_LENGTHS.size])[0]
        if self.secret and not hmac.compare_digest(prefix_mac, expected):
            raise ProtocolError("authentication failed: the message MAC does not match the shared secret, this "
                                "connection's nonce and message counter", "auth")
        self.received += 1
        if header_len > max_header_bytes or body_len > max_body_bytes:
            raise ProtocolError(f"message too large (header {header_len} B, body {body_len} B; limits "
                                f"{max_header_bytes} B, {max_body_bytes} B)", "too_large")
        header = bytes(_recv_exact(self.sock, header_len, deadline))
        body = _recv_exact(self.sock, body_len, deadline)
        if self.secret:
            frame = hmac.new(self.secret, b"frame" + prefix_mac, hashlib.sha256)
            frame.update(header)
            frame.update(body)
            if not hmac.compare_digest(frame_mac, frame.digest()):
                raise ProtocolError("authentication failed: the message body does not match its MAC", "auth")
        return decode(header, bytes(body))


# --- generate requests and results ---------------------------------------------------------------------------

_SAMPLING_FIELDS = {"temperature": float, "top_p": float, "top_k": int, "max_new_tokens": int}


def generate_request(prompts: list, sampling: SamplingParams, num_samples: int = 1, seed: int = 0,
                     min_policy_version: int = 0, wait_timeout_s: float = 60.0, prompt_offset: int = 0
                     ) -> tuple[dict, dict]:
    """(fields, arrays) of a generate message."""
    flat = [np.asarray(p, np.int32).reshape(-1) for p in prompts]
    s = dataclasses.asdict(sampling)
    s["stop_strings"] = list(s["stop_strings"])
    s["stop_token_ids"] = None if s["stop_token_ids"] is None else list(s["stop_token_ids"])
    fields = {"sampling": s, "num_samples": num_samples, "seed": seed, "min_policy_version": min_policy_version,
              "wait_timeout_s": wait_timeout_s, "prompt_offset": prompt_offset}
    arrays = {"prompt_tokens": np.concatenate(flat) if flat else np.zeros(0, np.int32),
              "prompt_lengths": np.asarray([p.size for p in flat], np.int32)}
    return fields, arrays


def _field(fields: dict, name: str, kind: type, where: str):
    value = fields.get(name)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ProtocolError(f"{where}.{name} must be {kind.__name__}, got {str(value)[:50]}")
    if kind is float and not math.isfinite(value):
        raise ProtocolError(f"{where}.{name} must be finite, got {value}")
    return value


@dataclasses.dataclass
class GenerateRequest:
    """A validated generate message."""

    prompts: list[np.ndarray]
    sampling: SamplingParams
    num_samples: int
    seed: int
    min_policy_version: int
    wait_timeout_s: float
    prompt_offset: int = 0


def parse_generate(msg: Message) -> GenerateRequest:
    """Validate a generate message; errors name the offending field."""
    f = msg.fields
    s = f.get("sampling")
    if not isinstance(s, dict):
        raise ProtocolError("generate.sampling must be an object")
    kw = {k: _field(s, k, t, "sampling") for k, t in _SAMPLING_FIELDS.items()}
    stops = s.get("stop_strings", [])
    if not isinstance(stops, list) or not all(isinstance(x, str) for x in stops):
        raise ProtocolError("sampling.stop_strings must be a list of strings")
    ids = s.get("stop_token_ids")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(x, int) for x in ids)):
        raise ProtocolError("sampling.stop_token_ids must be null or a list of ints")
    try:
        sampling = SamplingParams(**kw, stop_strings=tuple(stops), stop_token_ids=None if ids is None else tuple(ids),
                                  include_stop_string=bool(s.get("include_stop_string", False))).validate()
    except ValueError as e:
        raise ProtocolError(str(e)) from e
    tokens, lengths = msg.arrays.get("prompt_tokens"), msg.arrays.get("prompt_lengths")
    if tokens is None or lengths is None or tokens.dtype != np.int32 or lengths.ndim != 1 or tokens.ndim != 1:
        raise ProtocolError("generate needs int32 1-D arrays prompt_tokens and prompt_lengths")
    if lengths.size == 0 or (lengths < 1).any() or int(lengths.sum()) != tokens.size:
        raise ProtocolError(f"prompt_lengths (sum {int(lengths.sum())}) must be >= 1 each and add up to "
                            f"prompt_tokens ({tokens.size})")
    prompts = np.split(tokens, np.cumsum(lengths)[:-1])
    num_samples = _field(f, "num_samples", int, "generate")
    if num_samples < 1:
        raise ProtocolError(f"generate.num_samples must be >= 1, got {num_samples}")
    prompt_offset = _field(f, "prompt_offset", int, "generate") if "prompt_offset" in f else 0
    if prompt_offset < 0:
        raise ProtocolError(f"generate.prompt_offset must be >= 0, got {prompt_offset}")
    return GenerateRequest(prompts, sampling, num_samples, _field(f, "seed", int, "generate"),
                           _field(f, "min_policy_version", int, "generate"),
                           _field(f, "wait_timeout_s", float, "generate"), prompt_offset)


def result_message(groups: list[list[Completion]], policy_version: int) -> tuple[dict, dict]:
    """(fields, arrays) of a result message for completions grouped per prompt (consecutive prompt indices,
    from the first group's: the request's prompt_offset)."""
    flat = [c for g in groups for c in g]
    fields = {"policy_version": policy_version, "num_samples": len(groups[0]) if groups else 0,
              "prompt_offset": int(flat[0].prompt_index) if flat else 0,
              "texts": [c.text for c in flat], "finish_reasons": [c.finish_reason for c in flat],
              "prompt_lengths": [c.prompt_length for c in flat]}
    arrays = {"tokens": np.concatenate([c.tokens for c in flat]) if flat else np.zeros(0, np.int32),
              "logprobs": np.concatenate([c.logprobs for c in flat]) if flat else np.zeros(0, np.float32),
              "completion_lengths": np.asarray([c.completion_length for c in flat], np.int32)}
    if flat and all(c.token_versions is not None for c in flat):  # partial rollouts: each token's version
        arrays["token_versions"] = np.concatenate([c.token_versions for c in flat]).astype(np.int32)
        arrays["policy_versions"] = np.asarray([c.policy_version for c in flat], np.int32)
    return fields, arrays


def parse_result(msg: Message) -> list[list[Completion]]:
    """Completions grouped per prompt from a result message (the inverse of `result_message`)."""
    f, a = msg.fields, msg.arrays
    lengths = a["completion_lengths"]
    n, offset = int(f["num_samples"]), int(f.get("prompt_offset", 0))
    tokens = np.split(a["tokens"], np.cumsum(lengths)[:-1]) if lengths.size else []
    logprobs = np.split(a["logprobs"], np.cumsum(lengths)[:-1]) if lengths.size else []
    flat = [Completion(offset + i // n, i % n, tokens[i], logprobs[i], f["texts"][i], f["finish_reasons"][i],
                       int(f["prompt_lengths"][i]), int(lengths[i]), int(f["policy_version"]))
            for i in range(lengths.size)]
    if "token_versions" in a:  # partial rollouts: a completion's tokens span versions, its own is its oldest
        if a["token_versions"].size != int(lengths.sum()) or a.get("policy_versions", np.zeros(0)).size != len(flat):
            raise ValueError(f"result message: token_versions has {a['token_versions'].size} entries for "
                             f"{int(lengths.sum())} tokens (policy_versions must have one per completion)")
        for c, versions, own in zip(flat, np.split(a["token_versions"], np.cumsum(lengths)[:-1]),
                                    a["policy_versions"]):
            c.token_versions, c.policy_version = versions, int(own)
    return [flat[i:i + n] for i in range(0, len(flat), n)]
