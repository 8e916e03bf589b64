"""The reward service: futures, timeouts, a SIGKILLed worker, backpressure, shutdown, metrics state."""

import os
import signal
import threading
import time

import pytest

from swerl_jax.reward import calculate_search_replace_reward
from swerl_jax.reward.service import RewardService, group_key, histogram_bin
from tests.reward.helpers import answer

CTX = {"a.py": "def f():\n    return 1\n"}
ORACLE = {"a.py": "def f():\n    return 2\n"}
HOOK = "python:tests.reward.service_hooks.slow_on_request"


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


def test_timeout_gets_fallback_and_worker_is_replaced():
    with RewardService(num_workers=1, timeout_s=1.0, fallback_reward=-0.5, kind=HOOK) as service:
        pid = service.worker_pids()[0]
        gold = answer([("a.py", "    return 1", "    return 2")])
        slow, fast = service.submit([item("sleep:60"), item(gold)])
        assert slow.result(timeout=60) == (-0.5, {"reason": "timeout"})
        assert fast.result(timeout=60)[0] == 1.0  # served by the replacement worker
        assert service.worker_pids()[0] != pid
        assert service.metrics()["timeouts"] == 1


def test_worker_killed_mid_item_and_hook_exception():
    with RewardService(num_workers=1, timeout_s=60, kind=HOOK) as service:
        pid = service.worker_pids()[0]
        stuck = service.submit([item("sleep:30")])[0]
        time.sleep(1.0)  # let the worker start the item
        os.kill(pid, signal.SIGKILL)
        assert stuck.result(timeout=30) == (-1.0, {"reason": "crash"})
        bug, ok = service.submit([item("raise"), item("sleep:0")])
        assert bug.result(timeout=60)[1]["reason"] == "exception"
        assert ok.result(timeout=60) == (0.25, {})
        m = service.metrics()
        assert m["crashes"] == 1 and m["exceptions"] == 1


def test_backpressure_blocks_submit_and_close_resolves_leftovers():
    service = RewardService(num_workers=1, timeout_s=60, kind=HOOK, max_pending=2)
    first = service.submit([item("sleep:30"), item("sleep:30")])
    blocked, refused = threading.Event(), []

    def third():
        try:
            service.submit([item("sleep:0")])
        except RuntimeError as e:  # close() while waiting for room refuses the item
            refused.append(str(e))
        blocked.set()

    thread = threading.Thread(target=third, daemon=True)
    thread.start()
    assert not blocked.wait(1.0)  # a third item waits for room
    service.close()
    thread.join(10)
    assert refused == ["RewardService is closed"]
    assert [f.result(timeout=1)[1]["reason"] for f in first] == ["closed", "closed"]
    assert service.metrics()["pending"] == 0
    with pytest.raises(RuntimeError, match="closed"):
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
def test_timeout_and_kill_with_chunks_queued_in_the_worker(prefetch):
    # chunk_size 1: the items behind the stuck one were already sent to the worker (unless prefetch is off);
    # they go back to the queue when it is killed and a fresh worker scores them.
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=1.5, kind=HOOK, chunk_size=1) as service:
        if not prefetch:
            service._workers[0].prefetch_limit = 0
        futures = service.submit([item("sleep:60"), item(gold), item("junk"), item(gold)])
        time.sleep(0.5)
        assert len(service._workers[0].busy) == (2 if prefetch else 1)  # the stuck item, and one sent ahead
        assert futures[0].result(timeout=60) == (-1.0, {"reason": "timeout"})
        assert [f.result(timeout=60)[0] for f in futures[1:]] == [1.0, -1.0, 1.0]
        pid = service.worker_pids()[0]
        stuck, *rest = service.submit([item("sleep:30")] + [item(gold)] * 3)
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        assert stuck.result(timeout=30) == (-1.0, {"reason": "crash"})
        assert [f.result(timeout=60)[0] for f in rest] == [1.0, 1.0, 1.0]
        m = service.metrics()
        assert m["timeouts"] == 1 and m["crashes"] == 1 and m["pending"] == 0


def test_idle_worker_killed_is_replaced_before_new_work():
    gold = answer([("a.py", "    return 1", "    return 2")])
    with RewardService(num_workers=1, timeout_s=30) as service:
        assert service.submit([item(gold)])[0].result(timeout=60)[0] == 1.0
        pid = service.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while service.worker_pids()[0] == pid and time.monotonic() < deadline:
            time.sleep(0.05)
        service.submit([item(gold)])[0].result(timeout=60)  # wakes the dispatcher if it was waiting
        assert service.worker_pids()[0] != pid
        assert service.submit([item(gold)])[0].result(timeout=60)[0] == 1.0
        assert service.metrics()["crashes"] == 0  # no item was lost with it
