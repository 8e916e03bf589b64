"""Collecting ahead of the trainer (`rl.max_staleness` = k >= 1): a thread draws step t's groups from the newest
published policy while the trainer updates on step t - 1's.

    producer = AheadProducer(collector, SerialSampler(sampler), max_staleness=1, first_step=1, last_step=N,
                             published=0)
    item = producer.take(step)          # step's groups (blocks until they are collected; re-raises its errors)
    producer.publish(step)              # after the trainer published policy version `step`
    producer.close()

The bound: the producer starts collecting step t only once version t - 1 - k is published, and asks the sampler
for that version or newer, so a batch trained at step t holds samples of versions >= t - 1 - k (staleness,
(t - 1) - version, is at most k; every sample records its version). At k = 0 that is the synchronous loop, which
the trainer runs without this thread (bit for bit today's). At most k + 1 collected steps wait at any time.

Data position: the producer reads the collector's data iterator ahead of the trainer, so after collecting step t
it snapshots the iterator's state (`Collected.position`, a `FrozenPosition`); the trainer checkpoints step t with
that snapshot, not with the live iterator. A run resumed from checkpoint s therefore re-draws steps s + 1, ...
from the same prompts with the same seeds (the collector's seeds depend on the step only), but from the newest
version at resume: at k >= 1, resume is exact in the data and not in the samples (the original run may have drawn
step s + 1 from version s - 1; the resumed one draws it from version s). At k = 0 resume stays exact.

Timing: `take` measures how long the trainer waited (its idle time); the producer measures how long it was
blocked by the bound (the sampler's idle time, as far as this loop is concerned) and how long it collected.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from swerl_jax.rl.collector import Collector, Groups, Sampler
from swerl_jax.sampler.types import Completion, SamplingParams

log = logging.getLogger(__name__)

_POLL_S = 0.5  # the waits wake this often, so Ctrl-C reaches the main thread within a second


class SerialSampler:
    """A sampler shared by the producer thread and the trainer's thread (evaluator, inline updates): one request
    at a time, since a `SamplerClient` is one socket and an `InlineSampler` one engine."""

    def __init__(self, sampler: Any) -> None:
        """Serialise the calls to `sampler`."""
        self.sampler = sampler
        self._lock = threading.Lock()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams = SamplingParams(),
                 num_samples: int = 1, seed: int = 0, min_policy_version: int = 0) -> list[list[Completion]]:
        """`sampler.generate`, after any call in flight."""
        with self._lock:
            return self.sampler.generate(prompts, sampling, num_samples=num_samples, seed=seed,
                                         min_policy_version=min_policy_version)

    def activity(self) -> dict:
        """The sampler's `activity` without waiting for the call in flight (progress only; {} without one)."""
        return self.sampler.activity() if hasattr(self.sampler, "activity") else {}

    def update(self, params: Any, version: int) -> None:
        """`sampler.update` (an inline sampler's new policy), never in the middle of a generation."""
        with self._lock:
            self.sampler.update(params, version)

    def close(self, wait_s: float = 1.0) -> None:
        """Close the sampler, politely when no call is in flight. A call still in flight after `wait_s` (the
        producer's request may wait for a policy version the stopping trainer will never publish) gets the
        sampler killed instead (`kill()` where it has one), so Ctrl-C stops the run in seconds."""
        if self._lock.acquire(timeout=wait_s):
            try:
                self.sampler.close()
            finally:
                self._lock.release()
            return
        log.warning("a sampler request is still in flight: stopping the sampler without waiting for it")
        getattr(self.sampler, "kill", self.sampler.close)()


class FrozenPosition(grain.DatasetIterator):
    """A data iterator's saved state, checkpointed in its place (Grain's handler asks only `get_state`)."""

    def __init__(self, state: Any) -> None:
        super().__init__()
        self._state = state

    def __next__(self) -> Any:
        raise TypeError("a FrozenPosition is a checkpointed data position, not an iterator to draw from")

    def get_state(self) -> Any:
        """The state the iterator had after the step was collected."""
        return self._state

    def set_state(self, state: Any) -> None:
        """Replace the saved state."""
        self._state = state


@dataclasses.dataclass(frozen=True)
class Collected:
    """One step's groups and how they were made."""

    step: int
    version: int  # the newest published version when collection started (every sample's is >= it)
    groups: Groups
    position: FrozenPosition | None  # the data iterator's state after this step's draw
    blocked_s: float  # the producer waited this long for version step - 1 - k
    collect_s: float  # and collected for this long
    # the collector's state_dict right after this step's collection (e.g. the agent stream's tasks in flight): what
    # the trainer checkpoints with this step, not the state of a collection further ahead
    state: dict = dataclasses.field(default_factory=dict)


def taken_metrics(item: Collected, waited_s: float, depth: int, step: int) -> dict[str, float]:
    """The metrics of step `step` taken from the producer after `waited_s` with `depth` steps ready: staleness per
    sample and per token, the queue depth, the trainer's wait, the producer's blocked and collect time and its idle
    fraction (blocked / (blocked + collect))."""
    (mean_age, max_age), (token_age, token_max) = staleness(item.groups, step), token_staleness(item.groups, step)
    return {"staleness_mean": mean_age, "staleness_max": max_age, "staleness_token_mean": token_age,
            "staleness_token_max": token_max, "async/queue_depth": depth, "async/trainer_wait_s": waited_s,
            "async/producer_blocked_s": item.blocked_s, "async/producer_collect_s": item.collect_s,
            "async/producer_idle_frac": item.blocked_s / max(item.blocked_s + item.collect_s, 1e-9)}


def token_staleness(groups: Groups, step: int) -> tuple[float, int]:
    """(mean, max) over the model's tokens of (step - 1) - the policy version that sampled each one (a partial
    rollout's tokens span versions: `Rollout.token_versions`; else every token is its rollout's version)."""
    ages = []
    for r in (r for group in groups.rollouts for r in group):
        versions = (np.full(len(r.completion_tokens), r.policy_version) if r.token_versions is None
                    else np.asarray(r.token_versions))
        model = versions >= 0 if r.token_mask is None else (np.asarray(r.token_mask) > 0) & (versions >= 0)
        ages.append(step - 1 - versions[model])
    ages = np.concatenate(ages) if ages else np.zeros(0)
    return (float(ages.mean()), int(ages.max())) if ages.size else (0.0, 0)


def check_token_staleness(groups: Groups, step: int, k: int) -> None:
    """The bound per token: every model token of step `step`'s groups was sampled by version >= step - 1 - k
    (partial rollouts take newer versions mid-generation, never older ones); RuntimeError naming the step if not."""
    _, worst = token_staleness(groups, step)
    if worst > k:
        raise RuntimeError(f"step {step}: a token was sampled {worst} policy versions behind the trainer, past "
                           f"rl.max_staleness={k}")


def staleness(groups: Groups, step: int) -> tuple[float, int]:
    """(mean, max) over the samples of (step - 1) - the policy version that generated them."""
    ages = [step - 1 - r.policy_version for group in groups.rollouts for r in group]
    return (sum(ages) / len(ages), max(ages)) if ages else (0.0, 0)


class AheadProducer:
    """A thread collecting steps first_step..last_step at most `max_staleness` versions behind the trainer."""

    def __init__(self, collector: Collector, sampler: Sampler, *, max_staleness: int, first_step: int,
                 last_step: int, published: int) -> None:
        """Start collecting at `first_step`; `published` is the newest policy version the sampler has."""
        if max_staleness < 1:
            raise ValueError(f"rl.max_staleness={max_staleness}: the producer is for k >= 1 (k = 0 is synchronous)")
        self.collector, self.sampler, self.k = collector, sampler, int(max_staleness)
        self.first, self.last = int(first_step), int(last_step)
        self.published = int(published)
        self._ready: dict[int, Collected] = {}
        self._error: BaseException | None = None
        self._stop = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="swerl-ahead-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for t in range(self.first, self.last + 1):
                t0 = time.perf_counter()
                with self._cond:
                    while not self._stop and self.published < t - 1 - self.k:
                        self._cond.wait(_POLL_S)
                    if self._stop:
                        return
                    version = self.published
                blocked = time.perf_counter() - t0
                t0 = time.perf_counter()
                groups = self.collector.collect(self.sampler, t, version)
                it = self.collector.data_iter
                position = FrozenPosition(it.get_state()) if hasattr(it, "get_state") else None
                item = Collected(t, version, groups, position, blocked, time.perf_counter() - t0,
                                 self.collector.state_dict())
                with self._cond:
                    self._ready[t] = item
                    self._cond.notify_all()
        except BaseException as e:  # re-raised in the trainer's thread by `take`
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def publish(self, version: int) -> None:
        """The trainer published policy `version`: collection may move on."""
        with self._cond:
            self.published = max(self.published, int(version))
            self._cond.notify_all()

    def take(self, step: int) -> tuple[Collected, float, int]:
        """Step `step`'s collection (waiting for it), the seconds waited, and how many steps were ready when
        asked (this one included: the queue depth)."""
        t0 = time.perf_counter()
        with self._cond:
            depth = len(self._ready)
            while step not in self._ready:
                if self._error is not None:
                    raise RuntimeError(f"collecting ahead of the trainer failed at step {step}: "
                                       f"{self._error!r}") from self._error
                if not self._thread.is_alive():
                    raise RuntimeError(f"the producer stopped before step {step} (collected steps "
                                       f"{self.first}..{self.last})")
                self._cond.wait(_POLL_S)
            item = self._ready.pop(step)
        check_token_staleness(item.groups, step, self.k)
        return item, time.perf_counter() - t0, depth

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop after the collection in flight (not waited for beyond `timeout_s`: the collector's own close
        stops its workers, and the thread is a daemon)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
