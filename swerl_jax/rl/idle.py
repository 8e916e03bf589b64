"""Where a GRPO step's wall time goes: the trainer's and the sampler's idle fractions, and generated tokens per
second per device (as NeMo-RL and prime-rl publish beside MFU).

    timed = TimedSampler(sampler)                  # records when each generate call runs
    busy = timed.busy_s(step_start, step_end)      # seconds within the window in which a call was running

Both come from real timestamps: `TimedSampler` records the span of every `generate` call (a call still running
counts up to the window's end); the trainer knows when it waited for data (the whole collection at k = 0, the
wait on the producer at k >= 1). A sampler driven around `generate` (agent.kv_cache="kept" drives the inline
engine's sessions directly) is not seen, so the trainer reports no sampler fraction there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from swerl_jax.runs.affinity import parse_ids


class TimedSampler:
    """A sampler that records the spans of its `generate` calls (thread-safe: the producer thread and the
    trainer's evaluator both call it); every other attribute is the wrapped sampler's."""

    def __init__(self, sampler: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        """Wrap `sampler`; `clock` is the timestamp source (the trainer's `time.perf_counter`)."""
        self.sampler, self.clock = sampler, clock
        self._lock = threading.Lock()
        self._spans: list[tuple[float, float]] = []
        self._open: dict[int, float] = {}
        self._next = 0

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """`sampler.generate`, timed."""
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._open[key] = self.clock()
        try:
            return self.sampler.generate(*args, **kwargs)
        finally:
            with self._lock:
                self._spans.append((self._open.pop(key), self.clock()))

    def busy_s(self, start: float, end: float) -> float:
        """Seconds of [start, end] in which at least one call was running (overlapping calls count once). Spans
        that ended before `start` are forgotten: windows are asked for in order (one per step)."""
        with self._lock:
            self._spans = [s for s in self._spans if s[1] > start]
            spans = sorted([(max(a, start), min(b, end)) for a, b in self._spans]
                           + [(max(a, start), end) for a in self._open.values()])
        busy, reach = 0.0, start
        for a, b in spans:
            a = max(a, reach)
            if b > a:
                busy += b - a
                reach = b
        return busy

    def __getattr__(self, name: str) -> Any:
        if name == "sampler":  # not set yet (e.g. during copying): no recursion
            raise AttributeError(name)
        return getattr(self.sampler, name)


def idle_fraction(busy_s: float, wall_s: float) -> float:
    """1 - busy / wall, within [0, 1] (0 for an empty window)."""
    if wall_s <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - busy_s / wall_s)))


def generated_tokens(rollouts: list) -> int:
    """The tokens the policy generated in `rollouts`: an episode's model tokens (its loss mask before any credit
    cut), an answer's completion."""
    return int(sum(r.token_mask.sum() if getattr(r, "token_mask", None) is not None else len(r.completion_tokens)
                   for r in rollouts))


def sampler_device_count(devices: str) -> int:
    """How many accelerators `sampler.devices` names apart from the trainer's (0 where it shares them: "")."""
    ids = parse_ids(devices, "sampler.devices", "a device list")
    return 0 if ids is None else len(ids)


def step_time_metrics(timed: TimedSampler | None, start: float, step_s: float, waited_s: float, generated: int,
                      devices: int) -> dict[str, float]:
    """A step's time/* shares: trainer_idle_frac (of the step's wall time [start, start + step_s], the part it
    waited for data: `waited_s`), sampler_idle_frac (the part no generate call ran; only with a `timed` sampler)
    and generated_tokens_per_s_per_device (`generated` tokens over the step's wall time and `devices`)."""
    out = {"trainer_idle_frac": min(1.0, max(0.0, waited_s / step_s)) if step_s > 0 else 0.0,
           "generated_tokens_per_s_per_device": generated / max(step_s, 1e-9) / max(devices, 1)}
    if timed is not None:
        out["sampler_idle_frac"] = idle_fraction(timed.busy_s(start, start + step_s), step_s)
    return out
