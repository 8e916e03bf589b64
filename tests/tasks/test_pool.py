"""The warm pool's invariants (`tasks.pool.WarmPool`), with a prepare function that only writes files: a dir is
handed out once, a used (dirty) dir is never handed out again, the pool never holds more than max_dirs dirs, and a
failed preparation is never pooled. Waits on the pool's own condition and on events, never on time."""

from __future__ import annotations

import threading

import pytest

from swerl_jax.tasks.pool import WarmPool

A, B = {"instance_id": "a__a-1"}, {"instance_id": "b__b-2"}


class Preparer:
    """Writes a marker in each dir; records the most dirs that existed at once under the pool's root; can be held."""

    def __init__(self, root, fail: set[str] = frozenset()):
        self.root, self.fail, self.most, self.calls = root, fail, 0, 0
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()

    def __call__(self, instance, work, host):
        self.gate.wait()
        with self.lock:
            self.calls += 1
            self.most = max(self.most, sum(1 for p in self.root.iterdir() if p.is_dir()))
        assert not any(work.iterdir()), "a pool hands prepare an empty dir"
        assert host.is_dir() and not host.is_relative_to(work)  # logs where the model never looks
        if instance["instance_id"] in self.fail:
            return {"status": "setup_failed", "error": "boom"}
        (work / "prepared").write_text(instance["instance_id"])
        return {"repo_dir": work / "repo"}


def test_a_dir_is_handed_out_once_and_a_used_dir_is_never_reused(tmp_path):
    prep = Preparer(tmp_path / "pool")
    pool = WarmPool(prep, tmp_path / "pool", per_key=2, max_dirs=4)
    pool.fill(A)
    assert pool.wait_ready(A)
    seen, leases = set(), []
    for _ in range(12):
        lease = pool.take(A)
        assert lease.work not in seen and (lease.work / "prepared").read_text() == "a__a-1"
        seen.add(lease.work)
        (lease.work / "model_wrote_this").write_text("dirty")  # the episode
        pool.release(lease)
        assert not lease.work.exists() and not lease.host.exists()  # removed, never cleaned for another episode
        leases.append(lease)
    assert pool.stats["warm"] >= 1 and pool.stats["warm"] + pool.stats["cold"] == 12
    with pytest.raises(ValueError, match="not a dir this pool handed out"):
        pool.release(leases[0])  # released twice
    pool.close()
    assert not any((tmp_path / "pool").iterdir()) and not any((tmp_path / "pool-host").iterdir())  # close: gone


def test_concurrent_episodes_never_share_a_dir(tmp_path):
    pool = WarmPool(Preparer(tmp_path / "pool"), tmp_path / "pool", per_key=3, max_dirs=8, workers=2)
    got, lock = [], threading.Lock()

    def episode():
        for _ in range(5):
            lease = pool.take(A)
            with lock:
                got.append(lease.work)
            pool.release(lease)

    threads = [threading.Thread(target=episode) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.close()
    assert len(got) == 20 and len(set(got)) == 20


def test_the_pool_never_holds_more_than_max_dirs(tmp_path):
    prep = Preparer(tmp_path / "pool")
    prep.gate.clear()  # hold every preparation: the dirs pile up as "preparing"
    pool = WarmPool(prep, tmp_path / "pool", per_key=2, max_dirs=3, workers=4)
    pool.fill(A)
    pool.fill(B)  # 4 wanted, room for 3
    assert sum(1 for _ in (tmp_path / "pool").iterdir()) == 3
    prep.gate.set()
    pool.wait_ready(A)
    pool.wait_ready(B, n=1)
    lease = pool.take(A)  # the pool is full: refills wait for room
    assert sum(1 for _ in (tmp_path / "pool").iterdir()) <= 3
    pool.release(lease)
    pool.wait_ready(A)
    pool.close()
    assert prep.most <= 3


def test_a_failed_preparation_is_never_pooled_and_reaches_the_taker(tmp_path):
    prep = Preparer(tmp_path / "pool", fail={"a__a-1"})
    pool = WarmPool(prep, tmp_path / "pool", per_key=2, max_dirs=4)
    pool.fill(A)
    assert not pool.wait_ready(A)  # both failed: nothing is ready
    assert pool.stats["failed"] == 2
    lease = pool.take(A)  # prepared now, on the taker's time, and its error is the taker's
    assert not lease.warm and lease.ready["status"] == "setup_failed"
    pool.release(lease)
    pool.close()
    with pytest.raises(RuntimeError, match="after close"):
        pool.take(A)
    with pytest.raises(ValueError, match="must be >= 1"):
        WarmPool(prep, tmp_path / "pool", max_dirs=0)


class FakeExecutor:
    """A ScriptExecutor whose prepare makes an empty repository folder (no sandbox runs)."""

    def __init__(self):
        self.prepared = []

    def prepare(self, instance, patch, log_dir, work):
        from swerl_jax.sandbox.bwrap import Sandbox

        assert log_dir.is_dir() and not log_dir.is_relative_to(work)
        (work / "repo").mkdir()
        self.prepared.append(work)
        return {"repo_dir": work / "repo", "sandbox": Sandbox(), "env": {}}

    def evaluate(self, instance, patch, log_dir):
        raise AssertionError("not graded here")


def test_an_episode_resets_into_a_pooled_checkout_and_hands_it_back(tmp_path):
    from swerl_jax.agent.env import SWEEnv
    from swerl_jax.tasks.pool import executor_prepare

    executor = FakeExecutor()
    pool = WarmPool(executor_prepare(executor), tmp_path / "pool", per_key=1, max_dirs=2)
    instance = {**A, "repo": "a/a", "problem_statement": "it breaks"}
    pool.fill(instance)
    assert pool.wait_ready(instance)
    env = SWEEnv(instance, tmp_path / "repos", tmp_path / "env", executor=executor, pool=pool)
    first = executor.prepared[0]
    assert "it breaks" in env.reset() and first.exists()
    assert env.workspace is not None and pool.stats["warm"] == 1  # the prepared dir, not one made now
    env.reset()  # a second episode: the first dir is handed back (removed), another taken
    assert not first.exists() and pool.stats["removed"] == 1
    env.close()
    pool.close()
    assert not any((tmp_path / "pool").iterdir()) and not (tmp_path / "env" / "episodes").exists()
