"""The host-side reward service: a pool of worker processes scoring rollouts asynchronously.

The trainer submits a group's rollouts as soon as the sampler returns them and collects futures later,
so rewards overlap generation. Each worker is a spawned process (never fork after JAX has started
threads) with its own pipe; one dispatcher thread hands items to workers, enforces the per-item time
limit (a stuck worker is SIGKILLed and replaced; the item gets ``fallback_reward``), replaces workers
that die, and resolves the futures. ``max_pending`` bounds queued items: ``submit`` blocks.

What travels. The rollouts of a GRPO group share their ``code_context`` and ``oracle_new_content``
(tens of KB); only the output differs. ``submit`` keys each distinct pair by a SHA-256 of its pickle,
a worker receives a pair once and keeps the last ``WORKER_GROUPS`` of them (the dispatcher mirrors
each worker's set and says what to drop, so both sides agree without asking), and an item is sent as
(id, key, output). Items of a group go preferably to a worker that holds it, where the reward's
per-group cache (the oracle's diffs, the split context files) is warm too.

No idle gaps. A worker gets its next chunk while it scores the current one (up to a chunk ahead), when
that cannot block the dispatcher: the messages it may not have read yet (none of their items answered)
plus the new one fit in a quarter of the socket's send buffer. Otherwise the chunk waits until the
worker is idle, hence reading.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing as mp
import pickle
import selectors
import threading
import time
from concurrent.futures import Future

from swerl_jax.reward.functions import get_reward_fn
from swerl_jax.reward.worker import WORKER_GROUPS, Worker, group_key

log = logging.getLogger(__name__)

HISTOGRAM_EDGES = (-1.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_TIMES_KEPT = 10_000
_ITEM_KEYS = ("code_context", "oracle_new_content", "output")
def histogram_bin(reward: float) -> int:
    """Index of the reward histogram bin: 0 holds negatives (format errors: -1), then [0,.1), ..., [.9,1]."""
    if reward < 0:
        return 0
    return min(1 + int(reward * 10), len(HISTOGRAM_EDGES) - 2)


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
        self.max_pending, self.chunk_size = max_pending, max(1, chunk_size)
        self._ctx = mp.get_context(start_method)
        self._cond = threading.Condition()
        # Queued items per group key, groups in arrival order; a requeued group goes back to the front.
        self._queue: collections.OrderedDict = collections.OrderedDict()
        self._queued = 0
        # key -> [(code_context, oracle_new_content), items submitted and not yet resolved]
        self._groups: dict[bytes, list] = {}
        self._futures: dict[int, tuple[Future, bytes]] = {}
        self._next_id = 0
        self._closed = False
        self._counters = self._empty_counters()
        self._times: collections.deque = collections.deque(maxlen=_TIMES_KEPT)
        # One selector for the dispatcher's whole life: each worker's pipe and process sentinel.
        self._selector = selectors.DefaultSelector()
        self._workers = [self._start_worker() for _ in range(num_workers)]
        self._thread = threading.Thread(target=self._loop, name="reward-service", daemon=True)
        self._thread.start()

    def _start_worker(self) -> Worker:
        worker = Worker(self._ctx, self.kind, self.fallback_reward)
        self._selector.register(worker.conn, selectors.EVENT_READ)
        self._selector.register(worker.process.sentinel, selectors.EVENT_READ)
        return worker

    @staticmethod
    def _empty_counters() -> dict:
        return {"items": 0, "timeouts": 0, "crashes": 0, "exceptions": 0, "format_errors": {},
                "histogram": [0] * (len(HISTOGRAM_EDGES) - 1)}

    def submit(self, items: list[dict]) -> list[Future]:
        """Queue items; returns one Future per item. Blocks while ``max_pending`` items are outstanding."""
        keys: dict[tuple[int, int], bytes] = {}  # the dicts of one group are usually the same objects
        for index, item in enumerate(items):
            missing = [k for k in _ITEM_KEYS if k not in item]
            if missing:
                raise ValueError(f"reward item {index} lacks field(s) {missing}")
        futures = []
        for item in items:
            pair = (item["code_context"], item["oracle_new_content"])
            ident = (id(pair[0]), id(pair[1]))
            key = keys.get(ident)
            if key is None:
                key = keys[ident] = group_key(*pair)
            future: Future = Future()
            with self._cond:
                while len(self._futures) >= self.max_pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    raise RuntimeError("RewardService is closed")
                item_id, self._next_id = self._next_id, self._next_id + 1
                self._futures[item_id] = (future, key)
                group = self._groups.get(key)
                if group is None:
                    self._groups[key] = [pair, 1]
                else:
                    group[1] += 1
                self._queue.setdefault(key, collections.deque()).append((item_id, key, item["output"]))
                self._queued += 1
                self._cond.notify_all()
            futures.append(future)
        return futures

    # -- dispatcher thread -------------------------------------------------------------------------

    def _resolve(self, item_id: int, reward: float, info: dict, seconds: float | None) -> None:
        with self._cond:
            entry = self._futures.pop(item_id, None)
            if entry is not None:
                group = self._groups[entry[1]]
                group[1] -= 1
                if group[1] == 0:
                    del self._groups[entry[1]]
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
        if entry is not None:
            entry[0].set_result((reward, info))

    def _requeue(self, items) -> None:
        """Put items back at the front of the queue, in their order (caller holds the lock)."""
        for item in reversed(items):
            key = item[1]
            queue = self._queue.get(key)
            if queue is None:
                queue = self._queue[key] = collections.deque()
            self._queue.move_to_end(key, last=False)
            queue.appendleft(item)
            self._queued += 1

    def _replace(self, index: int, reason: str) -> None:
        """Kill worker ``index`` (stuck or dead), give its item the fallback reward, start a fresh one."""
        worker = self._workers[index]
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(5)
        self._selector.unregister(worker.conn)
        self._selector.unregister(worker.process.sentinel)
        worker.conn.close()
        if worker.busy:
            # The item being scored gets the fallback; the other items sent go back to the queue front.
            item_id = worker.busy.popleft()[0]
            log.warning("reward item %d: %s; fallback reward %s", item_id, reason, self.fallback_reward)
            with self._cond:
                self._requeue(worker.busy)
            self._resolve(item_id, self.fallback_reward, {"reason": reason}, None)
        if not self._closed:
            self._workers[index] = self._start_worker()

    def _take(self, worker: Worker) -> list:
        """Pop the next chunk for ``worker`` (caller holds the lock): a group it holds, else one nobody
        holds, else the oldest; at most chunk_size items, fewer near the end so all workers get some."""
        chosen = None
        for key in self._queue:
            if key in worker.held:
                chosen = key
                break
            if chosen is None and not any(key in w.held for w in self._workers):
                chosen = key
        if chosen is None:
            chosen = next(iter(self._queue))
        queue = self._queue[chosen]
        size = max(1, min(self.chunk_size, self._queued // len(self._workers), len(queue)))
        chunk = [queue.popleft() for _ in range(size)]
        if not queue:
            del self._queue[chosen]
        self._queued -= size
        return chunk

    def _message(self, worker: Worker, chunk: list) -> tuple[bytes, list]:
        """The pickled message for a chunk, and the keys the worker then holds (applied once it is sent)."""
        held = collections.OrderedDict(worker.held)
        new_groups = {}
        with self._cond:
            for _, key, _ in chunk:
                if key not in held and key not in new_groups:
                    new_groups[key] = self._groups[key][0]
                held[key] = None
                held.move_to_end(key)
        drop = []
        while len(held) > WORKER_GROUPS:
            drop.append(held.popitem(last=False)[0])
        return pickle.dumps((new_groups, chunk, drop), protocol=pickle.HIGHEST_PROTOCOL), held

    def _send(self, worker: Worker, chunk: list, data: bytes, held) -> None:
        worker.held = held
        worker.busy.extend(chunk)
        worker.messages.append([len(chunk), len(data)])
        worker.unread += len(data)
        worker.wait_idle = False
        try:
            worker.conn.send_bytes(data)
        except (BrokenPipeError, OSError):
            pass  # the sentinel reports the dead worker; its items are requeued then

    def _feed(self) -> None:
        """Give chunks to idle workers, and a next chunk to busy ones where that cannot block."""
        for worker in self._workers:
            idle = not worker.busy
            if not idle and (len(worker.busy) > self.chunk_size or worker.wait_idle):
                continue  # a chunk ahead of the current item is enough, or the next one is large
            with self._cond:
                if not self._queue:
                    return
                chunk = self._take(worker)
            data, held = self._message(worker, chunk)
            if not idle and worker.unread + len(data) > worker.prefetch_limit:
                with self._cond:
                    self._requeue(chunk)  # too large to write while it is busy: wait until it is idle
                worker.wait_idle = True
                continue
            if idle:
                worker.deadline = time.monotonic() + self.timeout_s
            # An idle worker is reading its pipe; for a busy one, what it may not have read yet plus this
            # message fit in the socket's buffer.
            self._send(worker, chunk, data, held)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                wait_for_work = not self._queue and all(not w.busy for w in self._workers)
                if wait_for_work:
                    self._cond.wait(0.5)
            for index, worker in enumerate(self._workers):
                if not worker.busy and not worker.process.is_alive():
                    self._replace(index, "crash")  # died between chunks: replace it before it gets work
            if wait_for_work:
                continue
            self._feed()
            deadline = min((w.deadline for w in self._workers if w.busy), default=time.monotonic() + 0.05)
            timeout = min(max(deadline - time.monotonic(), 0.0), 0.05)
            ready = {key.fileobj for key, _ in self._selector.select(timeout)}
            for index, worker in enumerate(list(self._workers)):
                if worker.busy and worker.conn in ready:
                    try:
                        while worker.busy:
                            item_id, reward, info, seconds = worker.conn.recv()
                            worker.answered()
                            worker.deadline = time.monotonic() + self.timeout_s  # the next item's clock
                            self._resolve(item_id, reward, info, seconds)
                            if not worker.conn.poll():
                                break
                    except (EOFError, OSError):
                        self._replace(index, "crash")
                elif worker.conn in ready or worker.process.sentinel in ready:
                    self._replace(index, "crash")  # an idle worker's pipe only turns readable at its end
                elif worker.busy and (not worker.process.is_alive() or time.monotonic() > worker.deadline):
                    self._replace(index, "crash" if not worker.process.is_alive() else "timeout")

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
            if worker.busy:
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
        self._selector.close()
        with self._cond:
            leftovers = [future for future, _ in self._futures.values()]
            self._futures.clear()
            self._queue.clear()
            self._queued = 0
            self._groups.clear()
        for future in leftovers:
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
