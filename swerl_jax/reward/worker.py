"""The reward service's worker side: the process loop that scores items, and the dispatcher's handle on one worker.

Protocol. A started worker loads its reward function and answers ("ready", pid), or ("failed", error) when the
function cannot be loaded; the dispatcher sends it nothing before that, so a worker's start-up never counts
against an item's time limit. Then it reads (groups, [(id, key, output)], drop) messages and answers
(id, reward, compact info, seconds) per item; ``None`` stops it.

What travels. The rollouts of a GRPO group share their ``code_context`` and ``oracle_new_content`` (tens
of KB); only the output differs. ``submit`` keys each distinct pair by `group_key` (a SHA-256 of its
pickle); a worker receives a pair once and keeps the last ``WORKER_GROUPS`` of them (the dispatcher mirrors
each worker's set and says what to drop, so both sides agree without asking), so each rollout crosses the
pipe as (id, key, output). See `swerl_jax.reward.service`.
"""

from __future__ import annotations

import collections
import hashlib
import math
import os
import pickle
import signal
import socket
import time

from swerl_jax.reward.functions import compact_info, get_reward_fn, reward_pair

WORKER_GROUPS = 8  # (code_context, oracle_new_content) pairs a worker keeps
_SEND_BUFFER = 1 << 20  # asked for on the dispatcher's end of each pipe (the kernel may cap it)
# Reasons of an item the service could not score (its reward is the fallback): the reward function ran past
# the time limit, its worker died, it raised, or it returned NaN/inf; "closed": the service stopped first.
# They are not format errors of the answer (the trainer reports them apart).
FAILURE_REASONS = ("timeout", "crash", "exception", "nonfinite", "closed")


def score_item(fn, code_context: dict, oracle_new_content: dict, output: str,
               fallback_reward: float) -> tuple[float, dict]:
    """``fn``'s (reward, compact info) for one item; the fallback with reason exception / nonfinite when it
    raises, returns anything but a (float, dict) pair (a bare float, a str reward: `reward_pair`'s error) or a
    reward that is not a finite number."""
    try:
        reward, info = reward_pair(fn(code_context, oracle_new_content, output),
                                   f"reward function {getattr(fn, '__qualname__', fn)!s}")
        info = compact_info(info)
    except Exception as e:  # noqa: BLE001 - a user hook's bug must not kill the pool
        return fallback_reward, {"reason": "exception", "error": repr(e)[:500]}
    if not math.isfinite(reward):
        return fallback_reward, {"reason": "nonfinite", "error": f"reward function returned {reward!r}"}
    return reward, info


def _worker_main(conn, kind: str, fallback_reward: float) -> None:
    """Worker loop: say ready, then receive (groups, [(id, key, output)], drop) and reply per item
    (id, reward, compact info, seconds)."""
    # Ctrl-C reaches the whole process group: the trainer stops the service, which ends this loop; a worker's
    # own KeyboardInterrupt would only add a traceback per worker to the user's terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fn = get_reward_fn(kind)
    except Exception as e:  # noqa: BLE001 - reported to the dispatcher, which fails the service with it
        conn.send(("failed", f"{type(e).__name__}: {e}"[:2000]))
        return
    conn.send(("ready", os.getpid()))
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
            code_context, oracle_new_content = groups[key]
            reward, info = score_item(fn, code_context, oracle_new_content, output, fallback_reward)
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
        self.started = time.monotonic()
        self.ready = False  # set when its ("ready", pid) arrives: only then does it get items
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

    def check_start(self, readable: set, start_timeout_s: float):
        """A starting worker's state, given the dispatcher's readable handles: "ready" (its ready message is
        read), a RuntimeError carrying why its reward function cannot load, "crash" (it died), or
        "start_timeout" (not ready within start_timeout_s); None while it is still starting."""
        if self.conn in readable:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return "crash"
            if message[0] == "failed":
                return RuntimeError(message[1])
            self.ready = True
            return "ready"
        if self.process.sentinel in readable or not self.process.is_alive():
            return "crash"
        if time.monotonic() - self.started > start_timeout_s:
            return "start_timeout"
        return None

    def answers(self, timeout_s: float):
        """Yield (id, reward, info, seconds) for the answers waiting in the pipe, in order; each answer
        starts the next item's clock (``deadline``). Raises EOFError / OSError when the worker died."""
        while self.busy:
            answer = self.conn.recv()
            self.answered()
            self.deadline = time.monotonic() + timeout_s
            yield answer
            if not self.conn.poll():
                return

    def kill(self, join_s: float = 5.0) -> None:
        """SIGKILL the process (a stuck or unwanted item) and reap it."""
        if self.process.is_alive():
            self.process.kill()
        if join_s:
            self.process.join(join_s)

    def ask_to_stop(self) -> None:
        """Tell an idle worker to exit; kill a busy one (its result is no longer wanted)."""
        if self.busy:
            self.kill(join_s=0)
            return
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass

    def stop(self) -> None:
        """Wait for the process to exit (killing it if it does not) and close the pipe."""
        self.process.join(2)
        if self.process.is_alive():
            self.kill(join_s=2)
        self.conn.close()

    def answered(self) -> None:
        """Book the answer to the first item sent and not yet answered."""
        self.busy.popleft()
        message = self.messages[0]
        self.unread -= message[1]
        message[1] = 0
        message[0] -= 1
        if message[0] == 0:
            self.messages.popleft()
