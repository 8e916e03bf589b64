"""Collecting one step's rollouts: prompts -> sampler (G samples each) -> reward service, overlapped; and
`RepairCollector`, the GRPO trainer's collector (`rl.collector.Collector`) of the repair task built on it.

The step's prompts go to the sampler in requests of `prompts_per_request` prompts. As soon as a request's
completions come back they are submitted to the reward service (worker processes), and the next request is
sent at once, so scoring group k runs while the sampler generates group k + 1; the trainer only waits for the
rewards of the last request. `CollectTimes` says how much reward time was hidden.

The wait for rewards is bounded: the service resolves every item (its own time limit, fallbacks, failures),
so when none of the pending rewards resolves for the service's `hang_guard_s` the service is hung, and
`collect_rollouts` raises `RewardHangError` instead of blocking the trainer forever.

Seeds: request r of step s samples with `rollout_seed(seed, s, r)`; the sampler draws row (prompt i, sample j)
from that seed folded with i and j, so a step's rollouts depend only on (seed, step, policy) — a resumed run
regenerates exactly the rollouts of an uninterrupted one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from swerl_jax import sharding
from swerl_jax.config import rl_seed
from swerl_jax.data.budget import answer_budget_warning
from swerl_jax.data.loader import data_metrics, rl_dataset_from_config
from swerl_jax.reward.service import RewardService
from swerl_jax.rl import live
from swerl_jax.rl.collector import COMPLETION_BUCKET, Collector, Groups, Sampler, local_prompts
from swerl_jax.rl.rollouts import Rollout, RolloutGroups, first_reward_failure, flatten_groups
from swerl_jax.sampler.types import Completion, SamplingParams, sampling_params

if TYPE_CHECKING:
    from swerl_jax.sampler.engine import SamplingEngine

log = logging.getLogger("swerl_jax.rl")


class InlineSampler:
    """A `SamplingEngine` in the trainer's own process (`sampler.mode=inline`: debugging, tests).

    The trainer hands it each new policy directly (`update`) instead of publishing weights to disk.
    """

    def __init__(self, engine: SamplingEngine) -> None:
        """Sample from `engine` (a `sampler.engine.SamplingEngine`)."""
        if getattr(engine, "partial_rollouts", False):  # it would never see a version mid-request: say so
            raise ValueError("sampler.partial_rollouts=True takes the versions the trainer publishes while a request "
                             "decodes, in the sampler process: set sampler.mode=process (inline, the trainer hands "
                             "over its params between requests only)")
        self.engine = engine

    def update(self, params: dict, version: int) -> None:
        """Use `params` as policy `version` from the next request on."""
        self.engine.update_params(params, version)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams = SamplingParams(),
                 num_samples: int = 1, seed: int = 0, min_policy_version: int = 0, *,
                 prompt_offset: int = 0) -> list[list[Completion]]:
        """As `SamplerClient.generate`; the version must already be loaded (there is nothing to wait for)."""
        if self.engine.policy_version < min_policy_version:
            raise RuntimeError(f"inline sampler has policy version {self.engine.policy_version}, the step needs "
                               f"{min_policy_version}: the trainer did not hand over its params")
        return self.engine.generate(prompts, sampling, num_samples, seed, prompt_offset=prompt_offset)

    def activity(self) -> dict:
        """The engine's request in flight (`SamplingEngine.activity`)."""
        return self.engine.activity()

    def close(self) -> None:
        """Nothing to stop (the engine lives in this process)."""


DEFAULT_HANG_GUARD_S = 600.0  # for a reward service that does not say its own


class RewardHangError(TimeoutError):
    """No pending reward resolved within the hang guard: the reward service is stuck."""


def wait_rewards(futures: Sequence[Future], hang_guard_s: float, what: str = "rewards") -> list:
    """The futures' results in order, waiting as long as some future resolves in every `hang_guard_s`
    seconds; raises RewardHangError (naming how many are pending) when none does in a whole window, and a
    future's exception (a failed reward service) as soon as it is seen."""
    pending = set(futures)
    while pending:
        done, pending = concurrent.futures.wait(pending, timeout=hang_guard_s)  # one pass over n futures
        for future in done:
            future.result()  # raises a failed service's error now, not after the others time out
        if pending and not done:
            raise RewardHangError(f"{len(pending)} of {len(futures)} {what} were still pending after "
                                  f"{hang_guard_s:g} s without any resolving: the reward service is stuck")
    return [future.result() for future in futures]


@dataclasses.dataclass
class CollectTimes:
    """Wall-clock seconds of one step's collection."""

    generate_s: float = 0.0  # waiting on the sampler, all requests
    reward_wall_s: float = 0.0  # first reward submitted -> last reward scored
    reward_wait_s: float = 0.0  # waiting for rewards after the last generation returned (the exposed part)

    @property
    def reward_hidden_frac(self) -> float:
        """Fraction of the reward service's wall time that overlapped generation."""
        if self.reward_wall_s <= 0:
            return 1.0
        return float(min(1.0, max(0.0, 1.0 - self.reward_wait_s / self.reward_wall_s)))


def rollout_seed(seed: int, step: int, request: int) -> int:
    """The sampler seed of request `request` of step `step` (a non-negative int32)."""
    return int((int(seed) * 1_000_003 + int(step) * 7_919 + int(request) * 104_729) % (2**31 - 1))


def draw_seed(seed: int, draw: int) -> int:
    """The seed of a step's extra draw `draw` (`rl.dynamic_sampling`): `seed` itself for draw 0 (so a run without
    extra draws is unchanged), else a well-mixed non-negative int32 of (seed, draw)."""
    if draw == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed) % 2**32, int(draw)]).generate_state(1)[0] % (2**31 - 1))


def collect_rollouts(sampler: Sampler, reward_service, batch: dict, sampling: SamplingParams, num_samples: int,
                     step: int, seed: int, policy_version: int, prompts_per_request: int = 0,
                     hang_guard_s: float | None = None, progress: live.Report | None = None
                     ) -> tuple[RolloutGroups, CollectTimes]:
    """Sample `num_samples` completions for each prompt of `batch` (a loader RL batch) and score them.

    Args:
      sampler: where completions come from; must serve `policy_version` or newer.
      reward_service: `swerl_jax.reward.service.RewardService` (anything with `submit(items) -> futures`).
      prompts_per_request: prompts per sampler request (0: all in one); smaller requests overlap more reward
        work with generation at the cost of smaller decode batches.
      hang_guard_s: raise RewardHangError when no reward resolves for this long (None: the service's
        `hang_guard_s`, else DEFAULT_HANG_GUARD_S).
      progress: told what the collection is doing, live (`rl.live`: each request and the sampler's activity
        during it, the rewards scored so far).

    Returns P groups (one per prompt) of G rollouts in sample order, rewards filled in, and the timings.
    """
    prompts = [np.asarray(ids, np.int32) for ids in batch["prompt_ids"]]  # the loader's unpadded ids
    per_request = prompts_per_request if prompts_per_request > 0 else len(prompts)
    times = CollectTimes()
    groups: RolloutGroups = []
    futures: list[Future] = []
    first_submit = None
    finished: list[float] = []  # when each reward was scored (the service's thread resolves the futures)
    requests = -(-len(prompts) // per_request)
    scored = [0]

    def count_scored(_: Future) -> None:
        finished.append(time.perf_counter())
        scored[0] += 1
        if progress is not None:
            progress(f"rewards scored {scored[0]}/{len(futures)}")

    for r, start in enumerate(range(0, len(prompts), per_request)):
        chunk = prompts[start:start + per_request]
        t0 = time.perf_counter()
        with live.watching(sampler, progress, f"generating request {r + 1}/{requests} ({len(chunk)} prompts x "
                                              f"{num_samples})"):
            generated = sampler.generate(chunk, sampling, num_samples=num_samples, seed=rollout_seed(seed, step, r),
                                         min_policy_version=policy_version)
        times.generate_s += time.perf_counter() - t0
        items = []
        for i, completions in enumerate(generated):
            p = start + i
            groups.append([])
            for c in completions:
                text = c.text if c.text is not None else ""
                groups[p].append(Rollout(prompt_id=str(batch["instance_id"][p]), group=p,
                                        sample=c.sample_index, prompt_tokens=prompts[p], completion_tokens=c.tokens,
                                        sampler_logprobs=c.logprobs, finish_reason=c.finish_reason,
                                        completion=text, policy_version=c.policy_version,
                                        token_versions=c.token_versions))
                items.append({"code_context": batch["code_context"][p],
                              "oracle_new_content": batch["oracle_new_content"][p], "output": text})
        first_submit = first_submit or time.perf_counter()
        submitted = reward_service.submit(items)
        futures.extend(submitted)  # before the callbacks: one that runs at once counts against every future
        for future in submitted:
            future.add_done_callback(count_scored)
    if hang_guard_s is None:
        hang_guard_s = float(getattr(reward_service, "hang_guard_s", DEFAULT_HANG_GUARD_S))
    if progress is not None:
        progress(f"waiting for rewards ({scored[0]}/{len(futures)} scored)")
    t_wait = time.perf_counter()
    results = wait_rewards(futures, hang_guard_s, what=f"rewards of step {step}")
    for rollout, (reward, info) in zip(flatten_groups(groups), results, strict=True):
        rollout.reward, rollout.reward_info = reward, info
    t_done = time.perf_counter()
    times.reward_wait_s = t_done - t_wait
    if first_submit is not None and futures:
        # A future wakes its waiters before it runs its callbacks, so the last finish times may not be in
        # yet: then the end of the wait bounds them.
        last = max(finished) if len(finished) == len(futures) else t_done
        times.reward_wall_s = last - first_submit
    return groups, times


class RepairCollector(Collector):
    """The repair task's steps (SWE-RL): the Grain loader's next rl.prompts_per_step prompts (this process's
    share), rl.num_samples answers each from the sampler, scored by the reward service's workers while the next
    request generates (`collect_rollouts`)."""

    def __init__(self, config: Any) -> None:
        """Open the loader and start the reward workers (`reward.*`); nothing is sampled yet."""
        self.config = config
        self.num_samples = int(config.rl.num_samples)
        self.local_prompts = local_prompts(config)
        self.sampling = sampling_params(config)
        self.completion_cap = max(COMPLETION_BUCKET, int(config.sampler.max_new_tokens))
        if sharding.is_main_process() and (warning := answer_budget_warning(config)):
            log.warning("this config cannot learn: %s", warning)
        self.data_iter = iter(rl_dataset_from_config(config))
        self.progress: live.Report | None = None  # the trainer's live progress (set by it; None: nothing shown)
        self._failure_warned = False
        r = config.reward
        self.reward_service = RewardService(num_workers=int(r.num_workers), timeout_s=float(r.timeout_s),
                                            fallback_reward=float(r.fallback_reward), kind=str(r.kind))

    def collect(self, sampler: Sampler, step: int, policy_version: int, draw: int = 0) -> Groups:
        """Step `step`'s (extra draw `draw`'s) scored answers [P][G], with time/data_s, generate_s, reward_wall_s,
        reward_wait_s, reward_hidden_frac, the loader's metrics and the reward service's counters."""
        t0 = time.perf_counter()
        batch = next(self.data_iter)
        t_data = time.perf_counter() - t0
        # Groups are numbered within this process (its prompts); only process 0 writes rollout files.
        rollouts, times = collect_rollouts(
            sampler, self.reward_service, batch, self.sampling, self.num_samples, step,
            draw_seed(rl_seed(self.config), draw),
            policy_version=policy_version, prompts_per_request=int(self.config.sampler.prompts_per_request),
            progress=self.progress)
        failed = first_reward_failure(flatten_groups(rollouts))
        if failed is not None and not self._failure_warned and sharding.is_main_process():
            self._failure_warned = True  # the first one is named; every one is in reward_failure_rate
            log.warning("the reward (reward.kind=%s) failed on %d of %d rollouts of step %d: their reward is "
                        "reward.fallback_reward, counted in reward_failure_rate (not as malformed answers); "
                        "first: %s", self.config.reward.kind, failed[0], sum(map(len, rollouts)), step, failed[1])
        service = {k: v for k, v in self.reward_service.metrics().items()
                   if k in ("items", "timeouts", "crashes", "exceptions", "nonfinite", "format_error_total")}
        return Groups.scored(
            rollouts, self.num_samples,
            times={"data_s": t_data, "generate_s": times.generate_s, "reward_wall_s": times.reward_wall_s,
                   "reward_wait_s": times.reward_wait_s, "reward_hidden_frac": times.reward_hidden_frac},
            metrics={**data_metrics(self.data_iter), "reward_service": service})

    def state_dict(self) -> dict:
        """The reward service's counters."""
        return {"reward_service": self.reward_service.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore the reward service's counters."""
        self.reward_service.load_state_dict(state["reward_service"])

    def close(self) -> None:
        """Stop the reward workers."""
        self.reward_service.close()
