"""The host-side reward service: a pool of worker processes scoring rollouts asynchronously.

The trainer submits a group's rollouts as soon as the sampler returns them and collects futures later,
so rewards overlap generation. Each worker is a spawned process (never fork after JAX has started
threads) with its own pipe; one dispatcher thread hands items to idle workers, enforces the per-item
time limit (a stuck worker is SIGKILLed and replaced; the item gets ``fallback_reward``), replaces
workers that die, and resolves the futures. ``max_pending`` bounds queued items: ``submit`` blocks.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing as mp
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import wait

from swerl_jax.reward.functions import compact_info, get_reward_fn

log = logging.getLogger(__name__)

HISTOGRAM_EDGES = (-1.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_TIMES_KEPT = 10_000
_ITEM_KEYS = ("code_context", "oracle_new_content", "output")


def _worker_main(conn, kind: str, fallback_reward: float) -> None:
    """Worker loop: receive a chunk [(id, item)], reply (id, reward, compact info, seconds) per item."""
    fn = get_reward_fn(kind)
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        if chunk is None:
            return
        for item_id, item in chunk:
            start = time.perf_counter()
            try:
                reward, info = fn(item["code_context"], item["oracle_new_content"], item["output"])
                reward, info = float(reward), compact_info(info)
            except Exception as e:  # noqa: BLE001 - a user hook's bug must not kill the pool
                reward, info = fallback_reward, {"reason": "exception", "error": repr(e)[:500]}
            conn.send((item_id, reward, info, time.perf_counter() - start))


def histogram_bin(reward: float) -> int:
    """Index of the reward histogram bin: 0 holds negatives (format errors: -1), then [0,.1), ..., [.9,1]."""
    if reward < 0:
        return 0
    return min(1 + int(reward * 10), len(HISTOGRAM_EDGES) - 2)


class _Worker:
    """One worker process, its pipe and the item it is scoring."""

    def __init__(self, ctx, kind: str, fallback_reward: float):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, kind, fallback_reward), daemon=True)
        self.process.start()
        child.close()
        # Items sent and not yet answered, in order; the first one's deadline is ``deadline``.
        self.busy: collections.deque | None = None
        self.deadline = 0.0


class RewardService:
    """Score rollouts in ``num_workers`` processes; ``submit(items) -> list[Future[(reward, info)]]``.

    items are dicts with code_context, oracle_new_content, output. Use as a context manager or call
    ``close()``. Items go to workers in chunks of up to ``chunk_size`` (the time limit still applies per
    item). ``metrics()`` reports format errors by reason, a reward histogram, time per item,
    timeouts and crashes; ``state_dict()`` / ``load_state_dict()`` carry the counters through checkpoints.
    """

    def __init__(
        self,
        num_workers: int = 2,
        timeout_s: float = 10.0,
        fallback_reward: float = -1.0,
        kind: str = "continuous",
        max_pending: int = 4096,
        chunk_size: int = 8,
        start_method: str = "spawn",
    ):
        if num_workers < 1:
            raise ValueError(f"reward.num_workers must be >= 1, got {num_workers}")
        if timeout_s <= 0:
            raise ValueError(f"reward.timeout_s must be > 0, got {timeout_s}")
        if max_pending < 1:
            raise ValueError(f"reward.max_pending must be >= 1, got {max_pending}")
        get_reward_fn(kind)  # fail here, in the caller, on an unknown kind
        self.kind, self.timeout_s, self.fallback_reward = kind, timeout_s, float(fallback_reward)
        self.max_pending, self.chunk_size = max_pending, chunk_size
        self._ctx = mp.get_context(start_method)
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._futures: dict[int, Future] = {}
        self._next_id = 0
        self._closed = False
        self._counters = self._empty_counters()
        self._times: collections.deque = collections.deque(maxlen=_TIMES_KEPT)
        self._workers = [_Worker(self._ctx, kind, self.fallback_reward) for _ in range(num_workers)]
        self._thread = threading.Thread(target=self._loop, name="reward-service", daemon=True)
        self._thread.start()

    @staticmethod
    def _empty_counters() -> dict:
        return {"items": 0, "timeouts": 0, "crashes": 0, "exceptions": 0, "format_errors": {},
                "histogram": [0] * (len(HISTOGRAM_EDGES) - 1)}

    def submit(self, items: list[dict]) -> list[Future]:
        """Queue items; returns one Future per item. Blocks while ``max_pending`` items are outstanding."""
        futures = []
        for index, item in enumerate(items):
            missing = [k for k in _ITEM_KEYS if k not in item]
            if missing:
                raise ValueError(f"reward item {index} lacks field(s) {missing}")
            future: Future = Future()
            with self._cond:
                while len(self._futures) >= self.max_pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    raise RuntimeError("RewardService is closed")
                item_id, self._next_id = self._next_id, self._next_id + 1
                self._futures[item_id] = future
                self._queue.append((item_id, item))
                self._cond.notify_all()
            futures.append(future)
        return futures

    # -- dispatcher thread -------------------------------------------------------------------------

    def _resolve(self, item_id: int, reward: float, info: dict, seconds: float | None) -> None:
        with self._cond:
            future = self._futures.pop(item_id, None)
            c = self._counters
            c["items"] += 1
            reason = info.get("reason")
            if reason in ("timeout", "crash", "exception"):
                c[{"timeout": "timeouts", "crash": "crashes", "exception": "exceptions"}[reason]] += 1
            elif reward == -1.0 and reason:
                c["format_errors"][reason] = c["format_errors"].get(reason, 0) + 1
            c["histogram"][histogram_bin(reward)] += 1
            if seconds is not None:
                self._times.append(seconds)
            self._cond.notify_all()
        if future is not None:
            future.set_result((reward, info))

    def _replace(self, index: int, reason: str) -> None:
        """Kill worker ``index`` (stuck or dead), give its item the fallback reward, start a fresh one."""
        worker = self._workers[index]
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(5)
        worker.conn.close()
        if worker.busy:
            # The item being scored gets the fallback; the rest of its chunk goes back to the queue front.
            item_id, _ = worker.busy.popleft()
            log.warning("reward item %d: %s; fallback reward %s", item_id, reason, self.fallback_reward)
            with self._cond:
                self._queue.extendleft(reversed(worker.busy))
            self._resolve(item_id, self.fallback_reward, {"reason": reason}, None)
        if not self._closed:
            self._workers[index] = _Worker(self._ctx, self.kind, self.fallback_reward)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                sends = []
                for worker in self._workers:
                    if worker.busy is None and self._queue:
                        # Chunks of consecutive items (one GRPO group shares its context): pickle
                        # sends a shared code_context once per chunk, and there are fewer round trips.
                        size = max(1, min(self.chunk_size, len(self._queue) // len(self._workers)))
                        chunk = [self._queue.popleft() for _ in range(min(size, len(self._queue)))]
                        worker.busy = collections.deque(chunk)
                        worker.deadline = time.monotonic() + self.timeout_s
                        sends.append((worker, chunk))
                if not sends and all(w.busy is None for w in self._workers):
                    self._cond.wait(0.5)
                    continue
            # Send outside the lock: a large item blocks until the worker reads it; submit must not wait.
            for worker, chunk in sends:
                try:
                    worker.conn.send(chunk)
                except (BrokenPipeError, OSError):
                    pass  # the sentinel below reports the dead worker
            busy = [w for w in self._workers if w.busy is not None]
            deadline = min((w.deadline for w in busy), default=time.monotonic() + 0.05)
            timeout = min(max(deadline - time.monotonic(), 0.0), 0.05)
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout)
            for index, worker in enumerate(list(self._workers)):
                if worker.busy is None:
                    continue
                if worker.conn in ready:
                    try:
                        item_id, reward, info, seconds = worker.conn.recv()
                    except (EOFError, OSError):
                        self._replace(index, "crash")
                        continue
                    worker.busy.popleft()
                    worker.deadline = time.monotonic() + self.timeout_s  # the next item's clock starts
                    if not worker.busy:
                        worker.busy = None
                    self._resolve(item_id, reward, info, seconds)
                elif worker.process.sentinel in ready or not worker.process.is_alive():
                    self._replace(index, "crash")
                elif time.monotonic() > worker.deadline:
                    self._replace(index, "timeout")

    # -- lifecycle and metrics ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop the workers; outstanding futures get the fallback reward with reason 'closed'."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._thread.join(10)
        for worker in self._workers:
            if worker.busy is not None:
                worker.process.kill()  # mid-item: its result is no longer wanted
                continue
            try:
                worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for worker in self._workers:
            worker.process.join(2)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(2)
            worker.conn.close()
        with self._cond:
            leftovers = list(self._futures.items())
            self._futures.clear()
            self._queue.clear()
        for _, future in leftovers:
            future.set_result((self.fallback_reward, {"reason": "closed"}))

    def __enter__(self) -> RewardService:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (for monitoring, and for the crash test)."""
        return [w.process.pid for w in self._workers]

    def metrics(self) -> dict:
        """Counters plus time per item (mean/p50/p99 seconds over the last 10k scored items)."""
        with self._cond:
            c = self._counters
            times = sorted(self._times)
            out = {
                "items": c["items"], "timeouts": c["timeouts"], "crashes": c["crashes"],
                "exceptions": c["exceptions"], "format_errors": dict(c["format_errors"]),
                "format_error_total": sum(c["format_errors"].values()),
                "histogram": list(c["histogram"]), "histogram_edges": list(HISTOGRAM_EDGES),
                "pending": len(self._futures),
            }
        if times:
            out["time_mean_s"] = sum(times) / len(times)
            out["time_p50_s"] = times[len(times) // 2]
            out["time_p99_s"] = times[min(len(times) - 1, int(0.99 * len(times)))]
        return out

    def state_dict(self) -> dict:
        """Counters and recent item times, for a checkpoint."""
        with self._cond:
            c = self._counters
            return {**{k: c[k] for k in ("items", "timeouts", "crashes", "exceptions")},
                    "format_errors": dict(c["format_errors"]), "histogram": list(c["histogram"]),
                    "times": list(self._times)}

    def load_state_dict(self, state: dict) -> None:
        """Restore counters saved by ``state_dict``."""
        if len(state.get("histogram", [])) != len(HISTOGRAM_EDGES) - 1:
            raise ValueError(f"reward service state: histogram needs {len(HISTOGRAM_EDGES) - 1} bins")
        with self._cond:
            self._counters = {**{k: int(state[k]) for k in ("items", "timeouts", "crashes", "exceptions")},
                              "format_errors": dict(state["format_errors"]),
                              "histogram": [int(x) for x in state["histogram"]]}
            self._times = collections.deque(state.get("times", []), maxlen=_TIMES_KEPT)
