"""The reward service: futures, timeouts, a SIGKILLed worker, backpressure, shutdown, metrics state."""

import os
import signal
import threading
import time

import pytest

from swerl_jax.reward import calculate_search_replace_reward
from swerl_jax.reward.service import RewardService, histogram_bin
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
