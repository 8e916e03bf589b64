"""The reward service's queue: group affinity, arrival order, requeue at the front, chunk sizes."""

from __future__ import annotations

from swerl_jax.reward.queue import GroupQueue


def _queue(*keys: bytes) -> GroupQueue:
    q = GroupQueue()
    for i, key in enumerate(keys):
        q.push((i, key, f"out{i}"))
    return q


def test_take_prefers_the_workers_group_then_an_unheld_one_then_the_oldest():
    q = _queue(b"a", b"b", b"c", b"b")
    assert [i for i, *_ in q.take({b"b"}, [{b"b"}, {b"a"}], chunk_size=8, num_workers=1)] == [1, 3]
    assert [i for i, *_ in q.take(set(), [{b"a"}], chunk_size=8, num_workers=1)] == [2]  # c: nobody holds it
    assert [i for i, *_ in q.take(set(), [{b"a"}], chunk_size=8, num_workers=1)] == [0]  # only a is left
    assert len(q) == 0 and not q


def test_chunks_shrink_near_the_end_so_every_worker_gets_some():
    q = _queue(*[b"g"] * 6)
    assert len(q.take(set(), [], chunk_size=8, num_workers=2)) == 3  # half the queue each
    assert len(q.take(set(), [], chunk_size=2, num_workers=1)) == 2  # never over chunk_size
    assert len(q.take(set(), [], chunk_size=8, num_workers=4)) == 1  # at least one
    assert len(q) == 0


def test_requeued_items_go_back_to_the_front_in_their_order():
    q = _queue(b"a", b"b")
    chunk = q.take({b"b"}, [], chunk_size=8, num_workers=1)
    q.push((7, b"b", "late"))
    q.requeue(chunk)
    got = [q.take(set(), [], chunk_size=8, num_workers=1) for _ in range(2)]
    assert [[i for i, *_ in c] for c in got] == [[1, 7], [0]]  # b first again, its requeued item before the late one
    q.push((9, b"c", "x"))
    q.clear()
    assert len(q) == 0
