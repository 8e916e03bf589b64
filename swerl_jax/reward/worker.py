"""The reward service's worker side: the process loop that scores items, and the dispatcher's handle on one worker.

A worker keeps the last ``WORKER_GROUPS`` (code_context, oracle_new_content) pairs it was sent, keyed by
`group_key`, so each rollout crosses the pipe as (id, key, output). See `swerl_jax.reward.service`.
"""

from __future__ import annotations

import collections
import hashlib
import os
import pickle
import socket
import time

from swerl_jax.reward.functions import compact_info, get_reward_fn

WORKER_GROUPS = 8  # (code_context, oracle_new_content) pairs a worker keeps
_SEND_BUFFER = 1 << 20  # asked for on the dispatcher's end of each pipe (the kernel may cap it)


def _worker_main(conn, kind: str, fallback_reward: float) -> None:
    """Worker loop: receive (groups, [(id, key, output)], drop); reply (id, reward, compact info, seconds)."""
    fn = get_reward_fn(kind)
    groups: dict[bytes, tuple[dict, dict]] = {}
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        new_groups, items, drop = message
        groups.update(new_groups)
        for item_id, key, output in items:
            start = time.perf_counter()
            try:
                code_context, oracle_new_content = groups[key]
                reward, info = fn(code_context, oracle_new_content, output)
                reward, info = float(reward), compact_info(info)
            except Exception as e:  # noqa: BLE001 - a user hook's bug must not kill the pool
                reward, info = fallback_reward, {"reason": "exception", "error": repr(e)[:500]}
            conn.send((item_id, reward, info, time.perf_counter() - start))
        for key in drop:
            groups.pop(key, None)


def group_key(code_context: dict, oracle_new_content: dict) -> bytes:
    """Content key of a group's shared inputs (equal keys: equal contents, barring a SHA-256 collision)."""
    return hashlib.sha256(pickle.dumps((code_context, oracle_new_content), protocol=4)).digest()


def _prefetch_limit(conn) -> int:
    """Bytes that can surely be written to ``conn`` while the worker is busy: a quarter of its send buffer."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, ValueError):
        return 0
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER)
        except OSError:
            pass
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 4
    except OSError:
        return 0
    finally:
        sock.close()


class Worker:
    """One worker process, its pipe, the groups it holds and the items it was sent."""

    def __init__(self, ctx, kind: str, fallback_reward: float):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, kind, fallback_reward), daemon=True)
        self.process.start()
        child.close()
        self.prefetch_limit = _prefetch_limit(self.conn)
        # Items sent and not yet answered, in order (item_id, key, output); the first one's deadline is
        # ``deadline``. ``messages``: [items not answered, bytes if maybe unread] per message sent (the
        # worker has read a message once one of its items is answered); ``unread`` sums those bytes.
        self.busy: collections.deque = collections.deque()
        self.messages: collections.deque = collections.deque()
        self.unread = 0
        self.deadline = 0.0
        self.held: collections.OrderedDict = collections.OrderedDict()  # keys of the groups it holds (LRU)
        self.wait_idle = False  # a next chunk was too large to send while busy: send it once idle

    def answered(self) -> None:
        """Book the answer to the first item sent and not yet answered."""
        self.busy.popleft()
        message = self.messages[0]
        self.unread -= message[1]
        message[1] = 0
        message[0] -= 1
        if message[0] == 0:
            self.messages.popleft()
