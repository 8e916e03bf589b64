"""The reward service: futures, timeouts, a SIGKILLed worker, backpressure, shutdown, metrics state.

No test sleeps to let something happen: hooks signal the test when a worker starts an item or starts up
(tests/reward/helpers.Signals) and the test waits on that; timeouts are hang guards. An item that must be
scored in time is a millisecond of work against a time limit of seconds, and starts on a ready worker.
"""

import os
import select
import signal
import threading

import pytest

from swerl_jax.reward import calculate_search_replace_reward
from swerl_jax.reward.service import RewardService, RewardServiceError, ServiceClosed, group_key, histogram_bin
from tests.reward.helpers import Signals, answer, wait_until

CTX = {"a.py": "def f():\n    return 1\n"}
ORACLE = {"a.py": "def f():\n    return 2\n"}
HOOK = "python:tests.reward.service_hooks.slow_on_request"
START_HOOK = "python:tests.reward.start_hooks.score"


def item(output: str) -> dict:
    return {"code_context": CTX, "oracle_new_content": ORACLE, "output": output}


def test_results_equal_the_function_and_metrics_count_them():
    outputs = [answer([("a.py", "    return 1", f"    return {k}")]) for k in range(2, 12)] + ["junk"]
    with RewardService(num_workers=2, timeout_s=30) as service:
        futures = service.submit([item(o) for o in outputs])
        results = [f.result(timeout=60) for f in futures]
        m = service.metrics()
    for out, (reward, _) in zip(outputs, results, strict=True):
        assert reward == calculate_search_replace_reward(CTX, ORACLE, out)[0]
    assert results[0][0] == 1.0 and results[-1] == (-1.0, {"reason": "tag_count", "tag": "<think>",
                                                           "error": "count of <think> is not 1"})
    assert m["items"] == 11 and m["format_errors"] == {"tag_count": 1} and m["histogram"][0] == 1
    expected = [0] * 11
    for reward, _ in results:
        expected[histogram_bin(reward)] += 1
    assert m["histogram"] == expected and m["time_p99_s"] >= m["time_p50_s"] > 0


@pytest.fixture
def signals():
    sig = Signals()
    yield sig
    sig.close()


def test_timeout_gets_fallback_and_worker_is_replaced():
    with RewardService(num_workers=1, timeout_s=3.0, fallback_reward=-0.5, kind=HOOK) as service:
        pid = service.worker_pids()[0]
        gold = answer([("a.py", "    return 1", "    return 2")])
        slow, fast = service.submit([item("sleep:600"), item(gold)])
        assert slow.result(timeout=60) == (-0.5, {"reason": "timeout"})
        assert fast.result(timeout=60)[0] == 1.0  # served by the replacement worker
        assert service.worker_pids()[0] != pid
        assert service.metrics()["timeouts"] == 1


def test_worker_killed_mid_item_and_hook_exception(signals):
    with RewardService(num_workers=1, timeout_s=60, kind=HOOK) as service:
        stuck = service.submit([item(f"block:{signals.address}")])[0]
        pid = signals.wait()  # the worker has started the item
        assert pid == service.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        assert stuck.result(timeout=30) == (-1.0, {"reason": "crash"})
        bug, ok = service.submit([item("raise"), item("sleep:0")])
        assert bug.result(timeout=60)[1]["reason"] == "exception"
        assert ok.result(timeout=60) == (0.25, {})
        m = service.metrics()
        assert m["crashes"] == 1 and m["exceptions"] == 1


def test_backpressure_blocks_submit_and_close_resolves_leftovers(signals):
    service = RewardService(num_workers=1, timeout_s=60, kind=HOOK, max_pending=3)
    first = service.submit([item(f"block:{signals.address}"), item("sleep:0")])
    signals.wait()  # the worker holds the first item until it is killed
    refused = []

    def third():
        try:  # the first item fits (3 pending), the second waits for room
            service.submit([item("sleep:0"), item("sleep:0")])
        except ServiceClosed as e:  # close() while it waits refuses it, and hands back what was queued
            refused.append(e)

    thread = threading.Thread(target=third, daemon=True)
    thread.start()
    wait_until(lambda: service.metrics()["pending"] == 3, "the third call's first item is queued")
    service.close()
    thread.join(60)
    assert not thread.is_alive() and str(refused[0]) == "RewardService is closed"
    assert [f.result(timeout=1) for f in refused[0].futures] == [(-1.0, {"reason": "closed"})]
    assert [f.result(timeout=1)[1]["reason"] for f in first] == ["closed", "closed"]
    assert service.metrics()["pending"] == 0
    with pytest.raises(ServiceClosed, match="closed"):
        service.submit([item("x")])


def test_state_dict_roundtrip_and_bad_config():
    with RewardService(num_workers=1, timeout_s=30) as service:
        service.submit([item("junk")])[0].result(timeout=60)
        state = service.state_dict()
    with RewardService(num_workers=1, timeout_s=30) as restored:
        restored.load_state_dict(state)
        assert restored.metrics()["format_errors"] == {"tag_count": 1} and restored.metrics()["items"] == 1
    with pytest.raises(ValueError, match="reward.kind"):
        RewardService(kind="nope")
    with pytest.raises(ValueError, match="num_workers"):
        RewardService(num_workers=0)
    assert [histogram_bin(r) for r in (-1.0, 0.0, 0.05, 0.5, 0.99, 1.0)] == [0, 1, 1, 6, 10, 10]
    with pytest.raises(ValueError, match="not finite"):
        histogram_bin(float("nan"))
    with pytest.raises(ValueError, match="fallback_reward"):
        RewardService(fallback_reward=float("nan"))


def _groups(n: int) -> list[tuple[dict, dict]]:
    """n distinct (code_context, oracle_new_content) pairs."""
    out = []
    for g in range(n):
        ctx = {"a.py": f"def f():\n    return {g}\n" + "x = 1\n" * 40, "b.py": f"# group {g}\n"}
        out.append((ctx, {"a.py": ctx["a.py"].replace(f"return {g}", f"return {g + 100}")}))
    return out


def _outputs(g: int) -> list[str]:
    return [answer([("a.py", f"    return {g}", f"    return {g + k}")]) for k in (100, 7, 8)] + ["junk"]


def test_many_groups_interleaved_match_the_function_and_evicted_groups_are_resent():
    # More groups than a worker keeps (8): the oldest are dropped and sent again when they come back.
    groups = _groups(12)
    items = [{"code_context": c, "oracle_new_content": o, "output": _outputs(g)[k]}
             for k in range(4) for g, (c, o) in enumerate(groups)]
    with RewardService(num_workers=2, timeout_s=30, chunk_size=3) as service:
        for _ in range(2):
            results = [f.result(timeout=60) for f in service.submit(items)]
            for it, (reward, info) in zip(items, results, strict=True):
                want = calculate_search_replace_reward(it["code_context"], it["oracle_new_content"], it["output"])[0]
                assert reward == want, info
        assert service.metrics()["items"] == 2 * len(items)


def test_equal_contents_share_a_key_and_copies_score_the_same():
    ctx, oracle = _groups(1)[0]
    copy_ctx, copy_oracle = {k: "".join(v) for k, v in ctx.items()}, dict(oracle)
    assert group_key(ctx, oracle) == group_key(copy_ctx, copy_oracle)
    assert group_key(ctx, oracle) != group_key(ctx, {"a.py": oracle["a.py"] + "\n"})
    gold = _outputs(0)[0]
    with RewardService(num_workers=1, timeout_s=30) as service:
        first = service.submit([{"code_context": ctx, "oracle_new_content": oracle, "output": gold}])
        second = service.submit([{"code_context": copy_ctx, "oracle_new_content": copy_oracle, "output": gold}])
        assert first[0].result(timeout=60)[0] == second[0].result(timeout=60)[0] == 1.0


@pytest.mark.parametrize("prefetch", [True, False])
def test_kill_with_chunks_queued_in_the_worker(prefetch, signals):
    # chunk_size 1: the item behind the stuck one is sent to the worker ahead of time (unless prefetch is
    # off); it goes back to the queue when the worker is killed and a fresh worker scores it.
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=60, kind=HOOK, chunk_size=1) as service:
        if not prefetch:
            service._workers[0].prefetch_limit = 0
        futures = service.submit([item(f"block:{signals.address}"), item(gold), item("junk"), item(gold)])
        pid = signals.wait()
        if prefetch:
            wait_until(lambda: service.in_flight() == [2], "one item sent ahead of the stuck one")
        else:
            assert service.in_flight() == [1]  # nothing is sent to a busy worker
        os.kill(pid, signal.SIGKILL)
        assert futures[0].result(timeout=60) == (-1.0, {"reason": "crash"})
        assert [f.result(timeout=60)[0] for f in futures[1:]] == [1.0, -1.0, 1.0]
        m = service.metrics()
        assert m["crashes"] == 1 and m["timeouts"] == 0 and m["pending"] == 0


def test_timeout_with_chunks_queued_in_the_worker():
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=3.0, kind=HOOK, chunk_size=1) as service:
        futures = service.submit([item("sleep:600"), item(gold), item("junk"), item(gold)])
        assert futures[0].result(timeout=60) == (-1.0, {"reason": "timeout"})
        assert [f.result(timeout=60)[0] for f in futures[1:]] == [1.0, -1.0, 1.0]
        m = service.metrics()
        assert m["timeouts"] == 1 and m["crashes"] == 0 and m["pending"] == 0


def _wait_exit(pid: int) -> None:
    """Block until process ``pid`` has exited (a pidfd turns readable), 60 s at most."""
    fd = os.pidfd_open(pid)
    try:
        assert select.select([fd], [], [], 60)[0], f"process {pid} did not exit"
    finally:
        os.close(fd)


def test_idle_worker_killed_is_replaced_before_new_work():
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=30) as service:
        assert service.submit([item(gold)])[0].result(timeout=60)[0] == 1.0
        pid = service.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        _wait_exit(pid)
        # The dispatcher finds the dead idle worker before it hands out the new item.
        assert service.submit([item(gold)])[0].result(timeout=60)[0] == 1.0
        assert service.worker_pids()[0] != pid
        assert service.metrics()["crashes"] == 0  # no item was lost with it


@pytest.mark.parametrize("output", ["nan", "inf", "-inf"])
def test_nonfinite_reward_is_a_per_item_failure(output):
    # A NaN or inf used to kill the dispatcher (the histogram's int(reward * 10)): every future then hung.
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=60, kind=HOOK) as service:
        bad, good = service.submit([item(output), item(gold)])
        reward, info = bad.result(timeout=60)
        assert reward == -1.0 and info["reason"] == "nonfinite" and output in info["error"]
        assert good.result(timeout=60)[0] == 1.0
        assert service.submit([item(gold)])[0].result(timeout=60)[0] == 1.0  # the service still works
        m = service.metrics()
        assert m["nonfinite"] == 1 and m["format_error_total"] == 0 and m["histogram"][0] == 1


def test_cancel_is_refused_and_cannot_break_the_dispatcher():
    # A cancelled future made the dispatcher's set_result raise: its thread died and the rest hung.
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=60, kind=HOOK) as service:
        futures = service.submit([item("sleep:0.2"), item(gold), item(gold)])
        assert not any(f.cancel() for f in futures)
        assert [f.result(timeout=60)[0] for f in futures] == [0.25, 1.0, 1.0]
        assert service.submit([item(gold)])[0].result(timeout=60)[0] == 1.0


def test_dispatcher_failure_fails_every_pending_future():
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=60, kind=HOOK) as service:
        def broken(*args):
            raise RuntimeError("injected counter bug")

        service._counters.record = broken  # the dispatcher thread raises on the first answer
        futures = service.submit([item(gold), item(gold), item(gold)])
        # the item being answered keeps its (valid) reward; the others get the failure, none hangs
        assert futures[0].result(timeout=60)[0] == 1.0
        for future in futures[1:]:
            with pytest.raises(RewardServiceError, match="injected counter bug"):
                future.result(timeout=60)
        with pytest.raises(ServiceClosed, match="failed: .*injected counter bug"):
            service.submit([item(gold)])
        assert service.metrics()["pending"] == 0


def test_items_wait_for_a_ready_worker(signals, monkeypatch):
    # Two workers; the second is held in its start-up (its hook module's import waits for the test). Items
    # go only to the ready one: the held worker's start-up never counts against an item's time limit.
    monkeypatch.setenv("SWERL_TEST_START", f"gate:{signals.address}")
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=2, timeout_s=60, kind=START_HOOK, chunk_size=1) as service:
        _, first = signals.accept()
        first.sendall(b"g")  # this worker finishes starting
        held_pid, held = signals.accept()
        assert set(service.worker_pids()) >= {held_pid}
        futures = service.submit([item(gold) for _ in range(6)])
        assert [f.result(timeout=60)[0] for f in futures] == [1.0] * 6  # all while the other one starts
        assert service.in_flight() == [0, 0] and service.metrics()["timeouts"] == 0
        held.sendall(b"g")
        held.close()
        first.close()
        assert [f.result(timeout=60)[0] for f in service.submit([item(gold)] * 6)] == [1.0] * 6


@pytest.mark.parametrize("mode, message", [
    ("fail", "cannot be loaded in a worker: .*refuses to load in a worker process"),
    ("exit", "3 reward workers in a row died"),
])
def test_workers_that_cannot_start_fail_the_service(mode, message, monkeypatch):
    monkeypatch.setenv("SWERL_TEST_START", mode)
    with RewardService(num_workers=1, timeout_s=60, kind=START_HOOK) as service:
        future = service.submit([item("x")])[0]
        with pytest.raises(RewardServiceError, match=message):
            future.result(timeout=120)
        with pytest.raises(ServiceClosed, match=message):
            service.submit([item("x")])


def test_a_worker_that_never_gets_ready_fails_the_service(signals, monkeypatch):
    monkeypatch.setenv("SWERL_TEST_START", f"gate:{signals.address}")  # never opened
    with RewardService(num_workers=1, timeout_s=60, kind=START_HOOK, start_timeout_s=1.0) as service:
        future = service.submit([item("x")])[0]
        with pytest.raises(RewardServiceError, match="not ready within 1.0 s"):
            future.result(timeout=120)


def test_a_ctrl_c_reaches_no_worker():
    """Issue 31.8: Ctrl-C goes to the whole process group; each worker printed its own KeyboardInterrupt
    traceback (train's Ctrl-C was 89 lines). Workers ignore SIGINT: the trainer stops them."""
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=30) as service:
        assert service.submit([item(gold)])[0].result(timeout=60)[0] == 1.0
        pid = service.worker_pids()[0]
        os.kill(pid, signal.SIGINT)
        assert service.submit([item(gold)])[0].result(timeout=60)[0] == 1.0  # delivered after the signal
        assert service.worker_pids() == [pid] and service.metrics()["crashes"] == 0
