"""Dynamic sampling (DAPO, Yu et al. 2025; SkyRL's zero_variance_filter + sample_full_batch): `rl.dynamic_sampling`.

A group whose counted rewards are all equal (every sample resolved, or none) has advantage 0 for every sample:
it gives GRPO no gradient, yet its samples were generated. `DynamicSampling` wraps a step's collector: it drops
such groups and draws the next batch of prompts until the step holds rl.prompts_per_step groups with a signal.

    collector = DynamicSampling(inner, num_prompts=P, max_draws=rl.dynamic_sampling_max_draws)

Per step, draw d = 0, 1, ... calls `inner.collect(sampler, step, version, draw=d)`, which takes the next prompt
batch from the inner collector's data iterator and samples it with a seed of (step, d) (`collect.draw_seed`; draw
0 is the step's usual seed). Groups with a signal are kept in draw order until P are kept; the rest of the last
draw's signal groups are discarded (DAPO's, verl's: the batch is exactly P groups). After `max_draws` draws a
batch still short is filled with dropped groups in draw order (no gradient, but the batch keeps its shape), and
counted. Because every draw advances the inner iterator, `data_iter` (the checkpointed position) accounts for
them: a resumed run draws exactly what an uninterrupted one would. Everything drawn is counted in `dynamic/*`.

The criterion is `group_advantages`' own: fewer than 2 counted samples, or max == min over them (counted: not
`excluded`, and not truncated where compact filtering keeps truncated samples out of the baseline).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swerl_jax.rl.collector import Collector, Groups, Sampler
from swerl_jax.rl.idle import generated_tokens
from swerl_jax.rl.rollouts import flatten_groups


def signal_groups(rewards: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Bool [P]: groups whose counted rewards differ (at least 2 counted samples, max > min), i.e. the groups
    `group_advantages` gives a nonzero advantage to. `valid` [P, G] (None: all) marks the counted samples."""
    rewards = np.asarray(rewards, np.float64)
    valid = np.ones(rewards.shape, bool) if valid is None else np.asarray(valid, bool)
    spread = np.where(valid, rewards, -np.inf).max(-1) - np.where(valid, rewards, np.inf).min(-1)
    return (valid.sum(-1) >= 2) & (spread > 0)


def merge_metrics(parts: list[dict], weights: list[int]) -> dict:
    """The collector metrics of several draws as one step's: `*_max` the largest, `*_min` the smallest, other
    numbers the mean weighted by each draw's group count (a rate over every drawn group), and anything else
    (e.g. a service's cumulative counters, the loader's position) the last draw's."""
    out: dict = {}
    for key in parts[-1]:
        values = [p[key] for p in parts if key in p]
        if not all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in values):
            out[key] = values[-1]
        elif key.endswith("_max"):
            out[key] = max(values)
        elif key.endswith("_min"):
            out[key] = min(values)
        else:
            w = [wt for p, wt in zip(parts, weights) if key in p]
            out[key] = float(np.average(np.asarray(values, np.float64), weights=np.asarray(w, np.float64)))
    return out


class DynamicSampling(Collector):
    """A collector that fills each step with groups that carry a signal (see the module docstring)."""

    def __init__(self, inner: Collector, num_prompts: int, max_draws: int, exclude_truncated: bool = False) -> None:
        """Wrap `inner` (a collector whose `collect` takes `draw=`); `num_prompts`: this process's groups per step;
        `exclude_truncated`: truncated samples are out of the baseline (`rl.baseline_excludes_filtered` with
        compact filtering), so they do not count towards a group's signal either."""
        if max_draws < 1:
            raise ValueError(f"rl.dynamic_sampling_max_draws must be >= 1, got {max_draws}")
        self.inner, self.num_prompts, self.max_draws = inner, int(num_prompts), int(max_draws)
        self.exclude_truncated = bool(exclude_truncated)
        self.completion_cap = inner.completion_cap

    @property
    def data_iter(self) -> Any:
        """The inner collector's data position (after every draw so far)."""
        return self.inner.data_iter

    @data_iter.setter
    def data_iter(self, value: Any) -> None:
        self.inner.data_iter = value

    def collect(self, sampler: Sampler, step: int, policy_version: int, draw: int = 0) -> Groups:
        """Step `step`'s P groups with a signal (or filled, see the module docstring), and dynamic/* metrics:
        draws, prompts_drawn, groups_dropped (no signal), groups_discarded (signal groups past the P-th),
        groups_filled (no-signal groups kept after max_draws), kept_frac (kept / drawn), generated_tokens (over
        every draw)."""
        if draw:
            raise ValueError("DynamicSampling draws by itself; it cannot be one draw of another collector")
        kept: list[tuple[Groups, int]] = []  # (draw's groups, group index), in draw order
        dropped: list[tuple[Groups, int]] = []
        draws: list[Groups] = []
        discarded = 0
        while len(kept) < self.num_prompts and len(draws) < self.max_draws:
            groups = self.inner.collect(sampler, step, policy_version, draw=len(draws))
            draws.append(groups)
            signal = signal_groups(groups.rewards, groups.baseline_mask(self.exclude_truncated))
            for p in range(len(groups.rollouts)):
                if not signal[p]:
                    dropped.append((groups, p))
                elif len(kept) < self.num_prompts:
                    kept.append((groups, p))
                else:
                    discarded += 1
        filled = min(self.num_prompts - len(kept), len(dropped))
        chosen = kept + dropped[:filled]
        drawn = sum(len(g.rollouts) for g in draws)
        rollouts = [[_regroup(r, i) for r in g.rollouts[p]] for i, (g, p) in enumerate(chosen)]
        rewards = np.stack([g.rewards[p] for g, p in chosen])
        excluded = None
        if any(g.excluded is not None for g, _ in chosen):
            excluded = np.stack([g.excluded[p] if g.excluded is not None else np.zeros(g.rewards.shape[1], bool)
                                 for g, p in chosen])
        times = {k: float(sum(g.times.get(k, 0.0) for g in draws)) for k in draws[-1].times if k.endswith("_s")}
        times.update({k: float(np.mean([g.times[k] for g in draws if k in g.times]))
                      for k in draws[-1].times if not k.endswith("_s")})
        metrics = merge_metrics([g.metrics for g in draws], [len(g.rollouts) for g in draws])
        metrics.update({"dynamic/draws": len(draws), "dynamic/prompts_drawn": drawn,
                        "dynamic/groups_dropped": len(dropped) - filled, "dynamic/groups_discarded": discarded,
                        "dynamic/groups_filled": filled, "dynamic/kept_frac": len(kept) / max(drawn, 1),
                        # every draw's tokens were generated, the dropped groups' too (time/generated_tokens_*)
                        "dynamic/generated_tokens": sum(generated_tokens(flatten_groups(g.rollouts)) for g in draws)})
        return Groups(rollouts=rollouts, rewards=rewards, excluded=excluded, times=times, metrics=metrics)

    def credit(self, groups: Groups, advantages: np.ndarray) -> tuple[np.ndarray | None, dict[str, float]]:
        """The inner collector's credit of the merged groups."""
        return self.inner.credit(groups, advantages)

    def state_dict(self) -> dict:
        """The inner collector's state."""
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restore the inner collector's state."""
        self.inner.load_state_dict(state)

    def close(self) -> None:
        """Close the inner collector."""
        self.inner.close()


def _regroup(rollout: Any, group: int) -> Any:
    """`rollout` as group `group` of the merged step (a copy: a collected rollout is never changed)."""
    import dataclasses

    return dataclasses.replace(rollout, group=group)
