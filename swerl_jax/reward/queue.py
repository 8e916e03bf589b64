"""The reward service's queue: items waiting for a worker, kept by group so a chunk goes where its group is warm.

An item is (item_id, group key, output). Groups are kept in arrival order, each a FIFO of its items; a group put
back after its worker died goes to the front, so nothing waits behind later arrivals twice. `take` picks a chunk
for one worker: a group that worker already holds (its shared inputs and the reward's per-group cache are warm
there), else a group no worker holds, else the oldest group.
"""

from __future__ import annotations

import collections
from collections.abc import Container, Iterable, Sequence


class GroupQueue:
    """Queued reward items by group key; not thread-safe (the service holds its lock around every call)."""

    def __init__(self) -> None:
        self._groups: collections.OrderedDict[bytes, collections.deque] = collections.OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, item: tuple) -> None:
        """Queue an item behind its group's others (a new group goes last)."""
        self._groups.setdefault(item[1], collections.deque()).append(item)
        self._size += 1

    def requeue(self, items: Sequence[tuple]) -> None:
        """Put items back at the front of the queue, in their order (their groups first)."""
        for item in reversed(items):
            queue = self._groups.get(item[1])
            if queue is None:
                queue = self._groups[item[1]] = collections.deque()
            self._groups.move_to_end(item[1], last=False)
            queue.appendleft(item)
            self._size += 1

    def take(self, held: Container[bytes], held_by_workers: Iterable[Container[bytes]], chunk_size: int,
             num_workers: int) -> list[tuple]:
        """Pop the next chunk for a worker holding the groups `held` (the queue must not be empty; every worker's
        groups in `held_by_workers`): at most `chunk_size` items of one group, fewer near the end so every worker
        gets some."""
        holders = list(held_by_workers)
        chosen = None
        for key in self._groups:
            if key in held:
                chosen = key
                break
            if chosen is None and not any(key in h for h in holders):
                chosen = key
        if chosen is None:
            chosen = next(iter(self._groups))
        queue = self._groups[chosen]
        size = max(1, min(chunk_size, self._size // max(1, num_workers), len(queue)))
        chunk = [queue.popleft() for _ in range(size)]
        if not queue:
            del self._groups[chosen]
        self._size -= size
        return chunk

    def clear(self) -> None:
        """Drop every queued item."""
        self._groups.clear()
        self._size = 0
