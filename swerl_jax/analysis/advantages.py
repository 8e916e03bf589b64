"""Advantage tables from a run's rollouts: reward groups, estimators side by side, zero-variance groups.

The estimators are the trainer's own (`swerl_jax.rl.objectives.group_advantages`), applied to the same
logged reward groups, so the comparison shows exactly what each config.rl.advantage choice would feed
the loss.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

import numpy as np

from swerl_jax.rl.advantages import ADVANTAGE_ESTIMATORS, group_advantages

# The estimators registered when this module was imported (the notebook's default list); functions that take
# `kinds` read the registry at call time, so an estimator registered later (`register_advantage`) shows too.
ESTIMATORS = tuple(ADVANTAGE_ESTIMATORS)


@dataclasses.dataclass
class StepGroups:
    """The rollouts of one step as [P, G] arrays (group p = prompt p, sample g); NaN where a sample is absent."""

    step: int
    prompt_ids: list[str]
    rewards: np.ndarray
    lengths: np.ndarray
    logged_advantages: np.ndarray


def step_groups(rollouts: Sequence[dict]) -> list[StepGroups]:
    """Group rollouts by step, then by group index, into [P, G] arrays.

    Raises ValueError naming the step and group when two rollouts claim the same (group, sample) slot or
    when one group index carries two prompt ids.
    """
    by_step: dict = collections.defaultdict(list)
    for row in rollouts:
        by_step[row["step"]].append(row)
    out = []
    for step in sorted(by_step):
        rows = by_step[step]
        groups = sorted({r["group"] for r in rows})
        index = {g: i for i, g in enumerate(groups)}
        width = max(r["sample"] for r in rows) + 1
        shape = (len(groups), width)
        rewards, lengths, advs = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
        prompt_ids: list = [None] * len(groups)
        for r in rows:
            p, g = index[r["group"]], r["sample"]
            if not np.isnan(rewards[p, g]):
                raise ValueError(f"step {step}: two rollouts for group {r['group']} sample {g}")
            if prompt_ids[p] not in (None, r["prompt_id"]):
                raise ValueError(f"step {step}: group {r['group']} has prompt ids {prompt_ids[p]!r} and "
                                 f"{r['prompt_id']!r}")
            prompt_ids[p] = r["prompt_id"]
            rewards[p, g] = r["reward"]
            if r.get("completion_len") is not None:
                lengths[p, g] = r["completion_len"]
            if r.get("advantage") is not None:
                advs[p, g] = r["advantage"]
        out.append(StepGroups(step, prompt_ids, rewards, lengths, advs))
    return out


def compute_advantages(
    rewards: np.ndarray, kind: str, std_eps: float = 1e-6, std_ddof: int = 0
) -> np.ndarray:
    """Advantages of complete [P, G] reward groups under one registered estimator (`rl.advantage`), as numpy."""
    rewards = np.asarray(rewards, dtype=np.float64)  # the trainer's precision: no fp32 rounding of rewards first
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [P, G], got shape {rewards.shape}")
    if np.isnan(rewards).any():
        raise ValueError("rewards has missing samples (NaN); use complete groups (see complete_groups)")
    return np.asarray(group_advantages(rewards, kind=kind, std_eps=std_eps, std_ddof=std_ddof))


def complete_groups(groups: StepGroups) -> StepGroups:
    """The groups of a step without missing samples (a partly logged group cannot be re-estimated)."""
    keep = ~np.isnan(groups.rewards).any(axis=1)
    return StepGroups(groups.step, [p for p, k in zip(groups.prompt_ids, keep, strict=True) if k],
                      groups.rewards[keep], groups.lengths[keep], groups.logged_advantages[keep])


def estimator_table(
    rewards: np.ndarray, kinds: Sequence[str] | None = None, std_eps: float = 1e-6, std_ddof: int = 0
) -> dict[str, np.ndarray]:
    """{kind: advantages [P, G]} for the same reward groups under each estimator (None: every registered one)."""
    kinds = tuple(ADVANTAGE_ESTIMATORS) if kinds is None else kinds
    return {kind: compute_advantages(rewards, kind, std_eps, std_ddof) for kind in kinds}


def estimator_summary(table: dict[str, np.ndarray], rewards: np.ndarray) -> list[dict]:
    """Per estimator: mean |A|, std of A, max |A|, and the correlation of A with the reward (over all samples)."""
    rows = []
    flat_r = np.asarray(rewards, dtype=np.float64).ravel()
    for kind, adv in table.items():
        a = np.asarray(adv, dtype=np.float64).ravel()
        corr = float(np.corrcoef(a, flat_r)[0, 1]) if a.std() > 0 and flat_r.std() > 0 else float("nan")
        rows.append({"estimator": kind, "mean_abs": float(np.abs(a).mean()), "std": float(a.std()),
                     "max_abs": float(np.abs(a).max()), "corr_with_reward": corr})
    return rows


def group_spread(groups: StepGroups) -> list[dict]:
    """Per group of a step: prompt id, mean, std (population), min, max of the rewards, and zero-variance flag."""
    rows = []
    for pid, r in zip(groups.prompt_ids, groups.rewards, strict=True):
        r = r[~np.isnan(r)]
        rows.append({"prompt_id": pid, "n": int(r.size), "mean": float(r.mean()), "std": float(r.std()),
                     "min": float(r.min()), "max": float(r.max()), "zero_var": bool(np.ptp(r) == 0)})
    return rows


def zero_variance_fraction(all_groups: Sequence[StepGroups]) -> tuple[list[int], list[float]]:
    """(steps, fraction of groups whose rewards are all equal): those groups give zero GRPO advantage."""
    steps, fracs = [], []
    for g in all_groups:
        spread = np.nanmax(g.rewards, axis=1) - np.nanmin(g.rewards, axis=1)
        steps.append(g.step)
        fracs.append(float(np.mean(spread == 0)))
    return steps, fracs


def advantage_vs_length(all_groups: Sequence[StepGroups], kind: str = "grpo",
                        std_eps: float = 1e-6, std_ddof: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(completion lengths, advantages under `kind`) over every complete group of every step."""
    lengths, advs = [], []
    for g in all_groups:
        g = complete_groups(g)
        if g.rewards.size == 0:
            continue
        a = compute_advantages(g.rewards, kind, std_eps, std_ddof)
        ok = ~np.isnan(g.lengths)
        lengths.append(g.lengths[ok])
        advs.append(a[ok])
    if not lengths:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(lengths), np.concatenate(advs)
