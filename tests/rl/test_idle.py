"""`rl.idle`: the timed sampler's busy seconds in a window (overlaps once, a call in flight counted to the window's
end, spans before the window forgotten), the step's idle fractions and generated tokens/s/device by hand."""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest

from swerl_jax.rl.idle import TimedSampler, generated_tokens, sampler_device_count, step_time_metrics


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Fake:
    """A sampler whose generate call advances the clock by its duration, and has an engine and an update."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.engine, self.updated = clock, "engine", []

    def generate(self, prompts, sampling=None, num_samples=1, seed=0, min_policy_version=0, *, duration=1.0):
        self.clock.now += duration
        return [[seed]]

    def update(self, params, version):
        self.updated.append(version)


def test_busy_seconds_from_the_spans_of_the_calls():
    clock = Clock()
    timed = TimedSampler(Fake(clock), clock)
    clock.now = 1.0
    assert timed.generate([[1]], None, seed=7, duration=2.0) == [[7]]  # busy [1, 3]
    clock.now = 5.0
    timed.generate([[1]], duration=1.0)  # busy [5, 6]
    assert timed.busy_s(0.0, 10.0) == pytest.approx(3.0)
    assert timed.busy_s(2.0, 5.5) == pytest.approx(1.5)  # [2, 3] and [5, 5.5]
    assert timed.busy_s(3.5, 4.5) == 0.0
    timed.update("params", 3)  # everything else is the wrapped sampler's
    assert timed.engine == "engine" and timed.sampler.updated == [3]


def test_overlapping_calls_count_once_and_a_call_in_flight_counts_to_the_window_end():
    clock = Clock()
    started, release = threading.Event(), threading.Event()

    class Blocking:
        def generate(self, *args, **kwargs):
            started.set()
            release.wait(30)
            return []

    timed = TimedSampler(Blocking(), clock)
    timed._spans += [(0.0, 4.0), (2.0, 6.0)]  # two calls that overlapped on [2, 4]
    clock.now = 8.0
    worker = threading.Thread(target=timed.generate)
    worker.start()
    started.wait(30)
    assert timed.busy_s(0.0, 10.0) == pytest.approx(6.0 + 2.0)  # [0, 6] once, and [8, 10] still running
    clock.now = 9.0
    release.set()
    worker.join(30)
    assert timed.busy_s(7.0, 12.0) == pytest.approx(1.0)  # the call ended at 9; [0, 6] is forgotten now
    assert timed._spans == [(8.0, 9.0)]


def test_step_fractions_and_tokens_by_hand():
    clock = Clock()
    timed = TimedSampler(Fake(clock), clock)
    clock.now = 10.0
    timed.generate([[1]], duration=3.0)  # the sampler ran 3 of the step's 4 s
    m = step_time_metrics(timed, 10.0, 4.0, waited_s=3.5, generated=800, devices=2)
    assert m == pytest.approx({"trainer_idle_frac": 3.5 / 4, "sampler_idle_frac": 0.25,
                               "generated_tokens_per_s_per_device": 800 / 4 / 2})
    assert "sampler_idle_frac" not in step_time_metrics(None, 0.0, 1.0, 0.0, 0, 1)  # not measured: not reported
    episode = types.SimpleNamespace(token_mask=np.array([1, 1, 0, 0, 1], np.float32), completion_tokens=np.zeros(5))
    answer = types.SimpleNamespace(token_mask=None, completion_tokens=np.zeros(7))
    assert generated_tokens([episode, answer]) == 3 + 7
    assert sampler_device_count("") == 0 and sampler_device_count("2-5") == 4 and sampler_device_count("0,3") == 2
