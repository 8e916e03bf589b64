"""What the GRPO trainer asks of a step's data: a `Collector` returns `Groups` (rollouts with their rewards as an
array), and knows nothing of the update.

    groups = collector.collect(sampler, step, policy_version)    # P groups of G scored rollouts, rewards [P, G]
    ends, metrics = collector.credit(groups, advantages)          # optional: where each row's credit ends

Two collectors implement it: the repair task's (`swerl_jax.rl.collect.RepairCollector`: the Grain loader, the
sampler, the reward service) and the agent's (`swerl_jax.agent.trainer.AgentCollector`: tasks, sandboxed
environments, the sampler turn by turn); a test's scripted collector hands over fixed groups. The trainer
(`swerl_jax.rl.trainer.GRPOTrainer`) owns the policy and the sampler it publishes to, computes the advantages
from `Groups.rewards` and packs the rows (`rollouts.build_train_batch`); it does not know which collector it has.

The contract:
  - `collect` returns every (prompt, sample) of the step exactly once, scored (with `draw=d` > 0, the step's
    extra draw d: the next prompts, another seed; `rl.dynamic`): `Groups.rewards` [P, G] is final
    and the `Rollout`s are not changed afterwards by anyone (advantages and loss masks travel as arrays);
  - `data_iter` is the collector's checkpointed position in its data (the loop saves and restores it with each
    step, so a resumed run collects what an uninterrupted one would); `state_dict` / `load_state_dict` are
    other JSON state checkpointed with it (e.g. the reward service's counters);
  - `completion_cap` bounds a train row's completion (an answer: sampler.max_new_tokens; a multi-turn transcript:
    agent.max_context);
  - `close` releases what the collector started (worker processes, thread pools).

An evaluator (`Evaluator`) is the trainer's other injected callable: `(sampler, version) -> metrics`, called
every eval.every_steps on the sampler serving that policy version (the entry point builds it; `rl.build`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from swerl_jax.rl.rollouts import RolloutGroups, reward_matrix
from swerl_jax.sampler.types import Completion, SamplingParams

# A train row's shape is bucketed (`batching.row_shape`) so a run compiles a few programs: prompts in multiples of
# PROMPT_BUCKET tokens, completions of COMPLETION_BUCKET, up to the caps (data.max_prompt_len, `completion_cap`).
PROMPT_BUCKET, COMPLETION_BUCKET = 64, 32


class Sampler(Protocol):
    """What a collector needs of a sampler: `SamplerClient` (a separate process) or `rl.collect.InlineSampler`."""

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams = ..., num_samples: int = 1,
                 seed: int = 0, min_policy_version: int = 0) -> list[list[Completion]]:
        """`num_samples` completions per prompt from a policy version >= `min_policy_version`."""


# (the sampler serving policy `version`, version) -> metrics such as eval/score; {} where nothing is evaluated
Evaluator = Callable[[Sampler, int], dict]


@dataclasses.dataclass(frozen=True)
class Groups:
    """One step's collection: P groups of G scored rollouts, and what the trainer needs of them as arrays."""

    rollouts: RolloutGroups  # [P][G], samples in order; not changed after collection
    rewards: np.ndarray  # [P, G] float64
    excluded: np.ndarray | None = None  # [P, G] bool: samples without a usable reward, kept out of every baseline
    times: dict[str, float] = dataclasses.field(default_factory=dict)  # time/* seconds (data_s, generate_s, ...)
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)  # the collector's own metrics

    @classmethod
    def scored(cls, rollouts: RolloutGroups, num_samples: int, **fields: Any) -> Groups:
        """`Groups` of scored rollouts (their rewards as [P, G]; raises if one is missing or unscored)."""
        return cls(rollouts=rollouts, rewards=reward_matrix(rollouts, num_samples), **fields)

    @property
    def truncated(self) -> np.ndarray:
        """[P, G] bool: the samples compact filtering masks (`Rollout.truncated`)."""
        out = np.zeros(self.rewards.shape, bool)
        for p, group in enumerate(self.rollouts):
            for r in group:
                out[p, r.sample] = r.truncated
        return out

    def baseline_mask(self, exclude_truncated: bool = False) -> np.ndarray | None:
        """[P, G] bool: which samples enter their group's advantage baseline (`group_advantages`' `valid`; None:
        all of them). Out: the `excluded` samples and, with `exclude_truncated`, the truncated ones."""
        valid = ~self.truncated if exclude_truncated else None
        if self.excluded is not None and self.excluded.any():
            valid = (np.ones(self.rewards.shape, bool) if valid is None else valid) & ~self.excluded
        return valid


class Collector(Protocol):
    """Where a GRPO step's scored groups come from; see the module docstring. Subclass it for the defaults."""

    data_iter: Any
    completion_cap: int

    def collect(self, sampler: Sampler, step: int, policy_version: int, draw: int = 0) -> Groups:
        """Step `step`'s (1-based) groups, sampled from `sampler` at policy `policy_version` or newer. `draw` > 0:
        the step's extra draw (`rl.dynamic.DynamicSampling`): the next prompts, sampled with another seed
        (`rl.collect.draw_seed`); draw 0 is the step's usual collection."""
        ...

    def credit(self, groups: Groups, advantages: np.ndarray) -> tuple[np.ndarray | None, dict[str, float]]:
        """Where each sample's credit ends, given its advantage: [P, G] completion-token indices (tokens from there
        on leave the loss) or None for every token, and metrics. The default keeps every token."""
        return None, {}

    def state_dict(self) -> dict:
        """JSON state checkpointed with each step (besides `data_iter`)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned at the checkpoint being resumed."""

    def close(self) -> None:
        """Release what the collector started."""


def prompt_share(prompts_per_step: int, processes: int, where: str = "mesh.num_processes") -> int:
    """Each of `processes`' share of rl.prompts_per_step, or one ValueError line naming both keys (`where`: what
    set the process count) when they do not split: a process with no prompt of its own has nothing to train on."""
    if prompts_per_step < processes or prompts_per_step % processes:
        fit = processes * max(1, -(-prompts_per_step // processes))
        raise ValueError(f"rl.prompts_per_step={prompts_per_step} does not split over the {processes} processes of "
                         f"this run ({where}={processes}): each process samples its own share of the prompts; set "
                         f"rl.prompts_per_step to a multiple of {processes} (e.g. {fit})")
    return prompts_per_step // processes


def local_prompts(config: Any) -> int:
    """This process's share of rl.prompts_per_step (each process samples its own prompts)."""
    import jax

    return prompt_share(int(config.rl.prompts_per_step), jax.process_count(), "the JAX process count")
