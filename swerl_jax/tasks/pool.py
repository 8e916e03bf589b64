"""A warm pool of prepared checkouts, so that an episode starts without waiting for its checkout and install.

    pool = WarmPool(executor_prepare(executor), root, per_key=2)   # LocalExecutor.prepare, an empty patch
    pool.fill(instance)                       # background: per_key work dirs checked out and installed
    lease = pool.take(instance)               # a ready dir (or, when none is ready yet, one prepared now: cold)
    ...                                       # the episode runs in lease.work; lease.ready is prepare()'s result
    pool.release(lease)                       # the dir is removed (never reused) and the key refilled

An episode's dir is dirty the moment it is handed out (the model writes in it), so a dir is handed out once and
removed when released: the pool never cleans a used dir for another episode. Dirs are keyed by instance id (its
repository, commit and environment); the pool holds at most `max_dirs` dirs at once (ready, being prepared and
handed out), so its disk is bounded by `max_dirs` checkouts; a key's refill waits while the pool is full. A
preparation that fails (its result has a `status`) is never pooled: its dir is removed and `take` prepares
again, so its error reaches the caller from a fresh try.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import pathlib
import threading
import uuid
from collections.abc import Callable

from swerl_jax.sandbox.workdirs import remove_tree

# (instance, empty work dir, empty host dir for its logs: never inside the work dir) -> prepare()'s result
Prepare = Callable[[dict, pathlib.Path, pathlib.Path], dict]


def executor_prepare(executor) -> Prepare:
    """A `ScriptExecutor`'s `prepare` with an empty patch (checkout, environment, install), its logs in the host
    dir: what an episode's `reset` does, done ahead of it."""
    def prepare(instance: dict, work: pathlib.Path, host: pathlib.Path) -> dict:
        logs = host / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return executor.prepare(instance, "", logs, work)

    return prepare


@dataclasses.dataclass(frozen=True)
class Lease:
    """One prepared work dir, handed to one episode: `ready` is the prepare function's result; `warm` says whether
    it came ready from the pool (else it was prepared on the caller's time)."""

    key: str
    work: pathlib.Path
    host: pathlib.Path
    ready: dict
    warm: bool


class WarmPool:
    """`per_key` prepared work dirs for each instance asked for, refilled in the background; at most `max_dirs`
    dirs exist at once; a dir is handed out once and removed on release."""

    def __init__(self, prepare: Prepare, root: str | pathlib.Path, per_key: int = 2, max_dirs: int = 8,
                 workers: int = 2) -> None:
        """`prepare(instance, work, host)` readies an empty `work` (`executor_prepare`); each work dir's host dir
        (logs, gradings: the model never sees it) is `root`-host/<the same name>."""
        if per_key < 1 or max_dirs < 1 or workers < 1:
            raise ValueError(f"WarmPool: per_key ({per_key}), max_dirs ({max_dirs}) and workers ({workers}) must "
                             "be >= 1")
        self.prepare, self.root = prepare, pathlib.Path(root)
        self.per_key, self.max_dirs = per_key, max_dirs
        self.host_root = self.root.with_name(self.root.name + "-host")
        self.root.mkdir(parents=True, exist_ok=True)
        self.host_root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Condition()
        self._ready: dict[str, list[Lease]] = {}
        self._instances: dict[str, dict] = {}
        self._preparing: dict[str, int] = {}
        self._handed: set[pathlib.Path] = set()
        self._ever: set[pathlib.Path] = set()  # every dir this pool made: a path is never made (or handed) twice
        self._closed = False
        self._executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="warm-pool")
        self.stats = {"warm": 0, "cold": 0, "failed": 0, "removed": 0}

    def _count(self) -> int:
        return sum(map(len, self._ready.values())) + sum(self._preparing.values()) + len(self._handed)

    def _new_dir(self, key: str) -> pathlib.Path:
        work = self.root / f"{key}.{uuid.uuid4().hex[:12]}"
        assert work not in self._ever
        self._ever.add(work)
        work.mkdir(parents=True)
        (self.host_root / work.name).mkdir()
        return work

    def fill(self, instance: dict) -> None:
        """Start preparing dirs for `instance` until it has `per_key` ready or preparing (within `max_dirs`)."""
        key = instance["instance_id"]
        with self._lock:
            if self._closed:
                return
            self._instances[key] = instance
            while (len(self._ready.get(key, [])) + self._preparing.get(key, 0) < self.per_key
                   and self._count() < self.max_dirs):
                self._preparing[key] = self._preparing.get(key, 0) + 1
                work = self._new_dir(key)
                self._executor.submit(self._prepare_one, key, instance, work)

    def _prepare_one(self, key: str, instance: dict, work: pathlib.Path) -> None:
        try:
            ready = self.prepare(instance, work, self.host_root / work.name)
        except Exception as err:  # a failed preparation is never pooled; take() prepares again and raises there
            ready = {"status": "error", "error": f"{type(err).__name__}: {err}"}
        with self._lock:
            self._preparing[key] -= 1
            if "status" in ready or self._closed:
                self.stats["failed"] += "status" in ready
                self._remove(work)
            else:
                self._ready.setdefault(key, []).append(Lease(key, work, self.host_root / work.name, ready, True))
            self._lock.notify_all()

    def _remove(self, work: pathlib.Path) -> None:
        remove_tree(work)  # any depth, never following a link the model left
        remove_tree(self.host_root / work.name)
        self.stats["removed"] += 1

    def wait_ready(self, instance: dict, n: int | None = None, timeout: float | None = None) -> bool:
        """Block until `instance` has `n` (default per_key) ready dirs or none is being prepared; True when it has."""
        key, n = instance["instance_id"], self.per_key if n is None else n
        with self._lock:
            self._lock.wait_for(lambda: len(self._ready.get(key, [])) >= n or not self._preparing.get(key), timeout)
            return len(self._ready.get(key, [])) >= n

    def take(self, instance: dict) -> Lease:
        """A prepared dir for one episode of `instance`: a ready one from the pool (warm), else one prepared now on
        the caller's time (cold; its result may carry a `status`: the caller's error). The key is refilled."""
        key = instance["instance_id"]
        with self._lock:
            if self._closed:
                raise RuntimeError("WarmPool.take after close")
            ready = self._ready.get(key)
            lease = ready.pop(0) if ready else None
            if lease is None:
                work = self._new_dir(key)
                self._handed.add(work)  # counted against max_dirs while it is prepared here
            else:
                self._handed.add(lease.work)
                self.stats["warm"] += 1
        if lease is None:
            try:
                host = self.host_root / work.name
                lease = Lease(key, work, host, self.prepare(instance, work, host), warm=False)
            except BaseException:
                self.release(Lease(key, work, self.host_root / work.name, {}, warm=False))
                raise
            with self._lock:
                self.stats["cold"] += 1
        self.fill(instance)
        return lease

    def release(self, lease: Lease) -> None:
        """The episode is over: its dir is removed (a used dir is never handed out again) and the key refilled."""
        with self._lock:
            if lease.work not in self._handed:
                raise ValueError(f"WarmPool.release: {lease.work} is not a dir this pool handed out (or it was "
                                 "released already)")
            self._handed.discard(lease.work)
            self._remove(lease.work)
            instance = self._instances.get(lease.key)
        if instance is not None:
            self.fill(instance)

    def close(self) -> None:
        """Stop refilling and remove every ready dir (dirs still handed out are their episodes' to release)."""
        with self._lock:
            self._closed = True
            ready = [lease for leases in self._ready.values() for lease in leases]
            self._ready.clear()
        self._executor.shutdown(wait=True)
        with self._lock:
            for lease in ready:
                self._remove(lease.work)
