"""The reward service's counters: items, failures by kind, format errors by reason, a reward histogram, item times.

Not thread-safe by itself: `swerl_jax.reward.service.RewardService` calls it under its lock.
"""

from __future__ import annotations

import collections
import math

HISTOGRAM_EDGES = (-1.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_TIMES_KEPT = 10_000
# Reasons of a fallback reward that are counted as their own kind (not format errors), and their counter.
_FAILURE_COUNTERS = {"timeout": "timeouts", "crash": "crashes", "exception": "exceptions",
                     "nonfinite": "nonfinite"}
_COUNTS = ("items", *_FAILURE_COUNTERS.values())


def histogram_bin(reward: float) -> int:
    """Index of the reward histogram bin: 0 holds negatives (format errors: -1), then [0,.1), ..., [.9,1]."""
    if not math.isfinite(reward):
        raise ValueError(f"reward {reward!r} is not finite: it has no histogram bin")
    if reward < 0:
        return 0
    return min(1 + int(reward * 10), len(HISTOGRAM_EDGES) - 2)


class ServiceCounters:
    """What the service has scored so far, carried through checkpoints by ``state_dict``."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(_COUNTS, 0)
        self.format_errors: dict[str, int] = {}
        self.histogram = [0] * (len(HISTOGRAM_EDGES) - 1)
        self.times: collections.deque = collections.deque(maxlen=_TIMES_KEPT)

    def record(self, reward: float, info: dict, seconds: float | None) -> None:
        """Count one resolved item (``seconds``: its scoring time, None when it was not scored)."""
        self.counts["items"] += 1
        reason = info.get("reason")
        if reason in _FAILURE_COUNTERS:
            self.counts[_FAILURE_COUNTERS[reason]] += 1
        elif reward == -1.0 and reason:
            self.format_errors[reason] = self.format_errors.get(reason, 0) + 1
        self.histogram[histogram_bin(reward)] += 1
        if seconds is not None:
            self.times.append(seconds)

    def metrics(self) -> dict:
        """Counters plus time per item (mean/p50/p99 seconds over the last 10k scored items)."""
        times = sorted(self.times)
        out = {**self.counts, "format_errors": dict(self.format_errors),
               "format_error_total": sum(self.format_errors.values()),
               "histogram": list(self.histogram), "histogram_edges": list(HISTOGRAM_EDGES)}
        if times:
            out["time_mean_s"] = sum(times) / len(times)
            out["time_p50_s"] = times[len(times) // 2]
            out["time_p99_s"] = times[min(len(times) - 1, int(0.99 * len(times)))]
        return out

    def state_dict(self) -> dict:
        """Counters and recent item times, for a checkpoint."""
        return {**self.counts, "format_errors": dict(self.format_errors), "histogram": list(self.histogram),
                "times": list(self.times)}

    def load_state_dict(self, state: dict) -> None:
        """Restore counters saved by ``state_dict`` (a counter newer than the checkpoint starts at 0)."""
        if len(state.get("histogram", [])) != len(HISTOGRAM_EDGES) - 1:
            raise ValueError(f"reward service state: histogram needs {len(HISTOGRAM_EDGES) - 1} bins")
        self.counts = {k: int(state.get(k, 0)) for k in _COUNTS}
        self.format_errors = dict(state["format_errors"])
        self.histogram = [int(x) for x in state["histogram"]]
        self.times = collections.deque(state.get("times", []), maxlen=_TIMES_KEPT)
