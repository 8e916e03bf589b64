"""The host-side reward service: a pool of worker processes scoring rollouts asynchronously.

The trainer submits a group's rollouts as soon as the sampler returns them and collects futures later,
so rewards overlap generation. Each worker is a spawned process (never fork after JAX has started
threads) with its own pipe; one dispatcher thread hands items to workers, enforces the per-item time
limit (a stuck worker is SIGKILLed and replaced; the item gets ``fallback_reward``), replaces workers
that die, and resolves the futures. ``max_pending`` bounds queued items: ``submit`` blocks.

Every future is resolved: an item the service cannot score gets ``fallback_reward`` and its reason
(``FAILURE_REASONS``: timeout, crash, exception, nonfinite -- NaN/inf from the reward function -- closed);
if the dispatcher fails or workers cannot start, every pending future gets that error and ``submit``
raises it. An item's time limit starts once its worker is ready (`swerl_jax.reward.worker`). The reward
has no time bound of its own (difflib's matchers are super-linear on some inputs; BENCHMARKS.md, "The
reward's time bound"); ``timeout_s`` is the bound, and the trainer reports its timeouts as
``reward_timeout_rate``, apart from format errors.

What travels: a group's shared inputs once per worker, then (id, key, output) per item (see
`swerl_jax.reward.worker`). Items of a group go preferably to a worker that holds it, where the reward's
per-group cache (the oracle's diffs, the split context files) is warm too (`swerl_jax.reward.queue`).

No idle gaps. A worker gets its next chunk while it scores the current one (up to a chunk ahead), when
that cannot block the dispatcher: the messages it may not have read yet (none of their items answered)
plus the new one fit in a quarter of the socket's send buffer. Otherwise the chunk waits until the
worker is idle, hence reading.
"""

from __future__ import annotations

import collections
import logging
import math
import multiprocessing as mp
import pickle
import selectors
import threading
import time
from concurrent.futures import Future

from swerl_jax.reward.counters import HISTOGRAM_EDGES, ServiceCounters, histogram_bin
from swerl_jax.reward.functions import get_reward_fn
from swerl_jax.reward.queue import GroupQueue
from swerl_jax.reward.worker import FAILURE_REASONS, WORKER_GROUPS, Worker, group_key

__all__ = ["FAILURE_REASONS", "RewardService", "RewardServiceError", "ServiceClosed", "group_key",
           "histogram_bin", "HISTOGRAM_EDGES"]

log = logging.getLogger(__name__)

_ITEM_KEYS = ("code_context", "oracle_new_content", "output")
_START_ATTEMPTS = 3  # workers in a row that die before they are ready: then the service fails


class RewardServiceError(RuntimeError):
    """The service cannot score anything: its dispatcher failed or its workers cannot start."""


class ServiceClosed(RuntimeError):
    """``submit`` on a closed (or failed) service. ``futures``: those of the items of the refused call that
    were queued before it was closed (each resolved: the fallback with reason 'closed', or the failure)."""

    def __init__(self, message: str, futures: list[Future] | None = None):
        super().__init__(message)
        self.futures = futures or []


class RewardService:
    """Score rollouts in ``num_workers`` processes; ``submit(items) -> list[Future[(reward, info)]]``.

    items are dicts with code_context, oracle_new_content, output. Use as a context manager or call
    ``close()``. Items go to workers in chunks of up to ``chunk_size`` (the time limit still applies per
    item, from when a worker is ready). ``metrics()`` reports format errors by reason, a reward histogram,
    time per item, timeouts, crashes, exceptions and non-finite rewards; ``state_dict()`` /
    ``load_state_dict()`` carry the counters through checkpoints.
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
        start_timeout_s: float = 120.0,
    ):
        if num_workers < 1:
            raise ValueError(f"reward.num_workers must be >= 1, got {num_workers}")
        if timeout_s <= 0:
            raise ValueError(f"reward.timeout_s must be > 0, got {timeout_s}")
        if not math.isfinite(fallback_reward):
            raise ValueError(f"reward.fallback_reward must be a finite number, got {fallback_reward}")
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be > 0, got {start_timeout_s}")
        if max_pending < 1:
            raise ValueError(f"reward.max_pending must be >= 1, got {max_pending}")
        get_reward_fn(kind)  # fail here, in the caller, on an unknown kind
        self.kind, self.timeout_s, self.fallback_reward = kind, timeout_s, float(fallback_reward)
        self.max_pending, self.chunk_size = max_pending, max(1, chunk_size)
        self.start_timeout_s = float(start_timeout_s)
        self._ctx = mp.get_context(start_method)
        self._cond = threading.Condition()
        self._queue = GroupQueue()  # items waiting for a worker, by group
        # key -> [(code_context, oracle_new_content), items submitted and not yet resolved]
        self._groups: dict[bytes, list] = {}
        self._futures: dict[int, tuple[Future, bytes]] = {}
        self._next_id = 0
        self._closed = False  # no more items (closed or failed)
        self._shut = False  # close() was called
        self._failure: BaseException | None = None  # why the dispatcher stopped, if it failed
        self._start_failures = 0  # workers in a row that died or hung before they were ready
        self._counters = ServiceCounters()
        # One selector for the dispatcher's whole life: each worker's pipe and process sentinel.
        self._selector = selectors.DefaultSelector()
        self._workers = [self._start_worker() for _ in range(num_workers)]
        self._thread = threading.Thread(target=self._run, name="reward-service", daemon=True)
        self._thread.start()

    def _start_worker(self) -> Worker:
        worker = Worker(self._ctx, self.kind, self.fallback_reward)
        self._selector.register(worker.conn, selectors.EVENT_READ)
        self._selector.register(worker.process.sentinel, selectors.EVENT_READ)
        return worker

    @property
    def hang_guard_s(self) -> float:
        """Seconds without any item resolved after which a waiting caller may call the service hung: an
        item's limit, a stuck worker's kill and a replacement's start, with a generous margin."""
        return self.timeout_s + self.start_timeout_s + 60.0

    def submit(self, items: list[dict]) -> list[Future]:
        """Queue items; returns one Future per item. Blocks while ``max_pending`` items are outstanding.

        Raises ValueError naming an item that lacks a field (nothing is queued then), and ServiceClosed if
        the service is closed or failed, also while blocked (its ``futures``: this call's queued items).
        """
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
            future.set_running_or_notify_cancel()  # cancel() now refuses: only the service resolves it
            with self._cond:
                while len(self._futures) >= self.max_pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    raise ServiceClosed(self._closed_message(), futures)
                item_id, self._next_id = self._next_id, self._next_id + 1
                self._futures[item_id] = (future, key)
                group = self._groups.get(key)
                if group is None:
                    self._groups[key] = [pair, 1]
                else:
                    group[1] += 1
                self._queue.push((item_id, key, item["output"]))
                self._cond.notify_all()
            futures.append(future)
        return futures

    def _closed_message(self) -> str:
        if self._failure is not None:
            return f"RewardService failed: {self._failure}"
        return "RewardService is closed"

    # -- dispatcher thread -------------------------------------------------------------------------

    def _run(self) -> None:
        """The dispatcher thread: any exception fails the service instead of leaving futures unresolved."""
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - whatever it is, the waiting futures must hear of it
            log.exception("reward service dispatcher failed")
            self._fail(e)

    def _fail(self, error: BaseException) -> None:
        """Stop taking items and give every pending future ``error`` (a RuntimeError naming it)."""
        failure = error if isinstance(error, RewardServiceError) else RewardServiceError(
            f"reward service dispatcher failed: {type(error).__name__}: {error}")
        with self._cond:
            self._failure, self._closed = failure, True
            pending = [future for future, _ in self._futures.values()]
            self._futures.clear()
            self._queue.clear()
            self._groups.clear()
            self._cond.notify_all()
        for worker in self._workers:
            worker.kill(join_s=0)
        for future in pending:
            future.set_exception(failure)

    def _resolve(self, item_id: int, reward: float, info: dict, seconds: float | None) -> None:
        entry = None
        try:
            with self._cond:
                entry = self._futures.pop(item_id, None)
                if entry is not None:
                    group = self._groups[entry[1]]
                    group[1] -= 1
                    if group[1] == 0:
                        del self._groups[entry[1]]
                self._counters.record(reward, info, seconds)  # before the result: metrics() covers it then
                self._cond.notify_all()
        finally:  # popped is answered, even if counting fails (which then fails the service)
            if entry is not None:
                entry[0].set_result((reward, info))

    def _replace(self, index: int, reason: str) -> None:
        """Kill worker ``index`` (stuck or dead), give its item the fallback reward, start a fresh one.

        Raises RewardServiceError when ``_START_ATTEMPTS`` workers in a row die or hang before they are ready.
        """
        worker = self._workers[index]
        worker.kill()
        self._selector.unregister(worker.conn)
        self._selector.unregister(worker.process.sentinel)
        worker.conn.close()
        if worker.busy:
            # The item being scored gets the fallback; the other items sent go back to the queue front.
            item_id = worker.busy.popleft()[0]
            log.warning("reward item %d: %s; fallback reward %s", item_id, reason, self.fallback_reward)
            with self._cond:
                self._queue.requeue(worker.busy)
            self._resolve(item_id, self.fallback_reward, {"reason": reason}, None)
        if not worker.ready:
            self._start_failures += 1
            log.warning("reward worker %d: %s before it was ready", worker.process.pid, reason)
            if self._start_failures >= _START_ATTEMPTS:
                raise RewardServiceError(
                    f"{self._start_failures} reward workers in a row died or were not ready within "
                    f"{self.start_timeout_s} s of starting (reward.kind={self.kind!r}); last: {reason}")
        if not self._closed:
            self._workers[index] = self._start_worker()

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
            if not worker.ready:
                continue  # items only go to a worker that has said it is ready: start-up is not item time
            idle = not worker.busy
            if not idle and (len(worker.busy) > self.chunk_size or worker.wait_idle):
                continue  # a chunk ahead of the current item is enough, or the next one is large
            with self._cond:
                if not self._queue:
                    return
                chunk = self._queue.take(worker.held, [w.held for w in self._workers], self.chunk_size,
                                         len(self._workers))
            data, held = self._message(worker, chunk)
            if not idle and worker.unread + len(data) > worker.prefetch_limit:
                with self._cond:
                    self._queue.requeue(chunk)  # too large to write while it is busy: wait until it is idle
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
                starting = not all(w.ready for w in self._workers)
                if wait_for_work and not starting:
                    self._cond.wait(0.5)
            for index, worker in enumerate(self._workers):
                if worker.ready and not worker.busy and not worker.process.is_alive():
                    self._replace(index, "crash")  # died between chunks: replace it before it gets work
            if wait_for_work and not starting:
                continue
            self._feed()
            deadline = min((w.deadline for w in self._workers if w.busy), default=time.monotonic() + 0.05)
            timeout = min(max(deadline - time.monotonic(), 0.0), 0.05)
            ready = {key.fileobj for key, _ in self._selector.select(timeout)}
            for index, worker in enumerate(list(self._workers)):
                if not worker.ready:
                    state = worker.check_start(ready, self.start_timeout_s)
                    if isinstance(state, Exception):
                        raise RewardServiceError(f"reward.kind={self.kind!r} cannot be loaded in a worker: {state}")
                    if state == "ready":
                        self._start_failures = 0
                    elif state is not None:
                        self._replace(index, state)
                elif worker.busy and worker.conn in ready:
                    try:
                        for answer in worker.answers(self.timeout_s):
                            self._resolve(*answer)
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
            if self._shut:
                return
            self._shut = self._closed = True  # _closed alone: the dispatcher failed; the workers need stopping
            self._cond.notify_all()
        self._thread.join(10)
        for worker in self._workers:
            worker.ask_to_stop()
        for worker in self._workers:
            worker.stop()
        self._selector.close()
        with self._cond:
            leftovers = [future for future, _ in self._futures.values()]
            self._futures.clear()
            self._queue.clear()
            self._groups.clear()
        for future in leftovers:
            future.set_result((self.fallback_reward, {"reason": "closed"}))

    def __enter__(self) -> RewardService:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def in_flight(self) -> list[int]:
        """Per worker, the items sent to it and not yet answered (for monitoring, and for the tests)."""
        return [len(w.busy) for w in list(self._workers)]

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (for monitoring, and for the crash test)."""
        return [w.process.pid for w in self._workers]

    def metrics(self) -> dict:
        """Counters (items, timeouts, crashes, exceptions, nonfinite, format errors by reason, histogram),
        pending items, and time per item (mean/p50/p99 seconds over the last 10k scored items)."""
        with self._cond:
            return {**self._counters.metrics(), "pending": len(self._futures)}

    def state_dict(self) -> dict:
        """Counters and recent item times, for a checkpoint."""
        with self._cond:
            return self._counters.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restore counters saved by ``state_dict``."""
        counters = ServiceCounters()
        counters.load_state_dict(state)
        with self._cond:
            self._counters = counters
