"""Group-relative advantages (the `rl.advantage` registry), computed on the host in float64.

Why float64 on the host: the trainer calls these on the step's [P, G] reward matrix (a few hundred numbers) in
numpy. In float32 a group of sixteen equal, non-representable rewards (0.7) has a mean one rounding step off
and a std of ~1e-8; dividing by (std + 1e-6) turned that into +0.1065 for every sample (a biased update whose
size depended on the array shape). In float64 near-constant groups stay accurate (errors ~1e-10 after the
division), and a group whose rewards are all equal (max == min) is set to exactly 0 for every estimator: it
carries no signal, and the rounding of its mean must not invent one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from swerl_jax.rl.registry import lookup, register_in

ADVANTAGE_ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {}


def register_advantage(name: str) -> Callable[[Callable], Callable]:
    """Decorator: `fn(rewards [P, G] float64, std_eps, std_ddof) -> advantages [P, G]` becomes `rl.advantage=name`."""
    return register_in(ADVANTAGE_ESTIMATORS, name)


@register_advantage("grpo")
def _grpo_advantage(rewards: np.ndarray, std_eps: float, std_ddof: int) -> np.ndarray:
    mean = rewards.mean(axis=-1, keepdims=True)
    std = rewards.std(axis=-1, ddof=std_ddof, keepdims=True)
    return (rewards - mean) / (std + std_eps)


@register_advantage("drgrpo")
def _drgrpo_advantage(rewards: np.ndarray, std_eps: float, std_ddof: int) -> np.ndarray:
    del std_eps, std_ddof  # Dr.GRPO drops the std normalisation (its difficulty bias)
    return rewards - rewards.mean(axis=-1, keepdims=True)


@register_advantage("loo")
def _loo_advantage(rewards: np.ndarray, std_eps: float, std_ddof: int) -> np.ndarray:
    del std_eps, std_ddof
    g = rewards.shape[-1]
    others_mean = (rewards.sum(axis=-1, keepdims=True) - rewards) / (g - 1)
    return rewards - others_mean


@register_advantage("reinforce")
def _reinforce_advantage(rewards: np.ndarray, std_eps: float, std_ddof: int) -> np.ndarray:
    # REINFORCE without a baseline: unbiased, higher variance in general. With 0/1 rewards only the successes
    # move the policy (filtered behaviour cloning, RAFT): a failure's tokens carry no gradient at all.
    del std_eps, std_ddof
    return rewards.copy()


def group_advantages(rewards: np.ndarray, kind: str = "grpo", std_eps: float = 1e-6, std_ddof: int = 0,
                     valid: np.ndarray | None = None) -> np.ndarray:
    """Advantages [P, G] (float32) of rewards [P, G], each row (one prompt's G samples) normalised on its own.

    Statistics are float64 on the host; a zero-variance group (all counted samples equal) gets exactly 0 for
    every estimator. `valid` [P, G] bool (None: all) leaves samples out of their group's baseline (DeepSWE:
    masked trajectories get no reward, so they do not enter the group statistics, `rl.baseline_excludes_filtered`):
    each row is estimated over its valid samples only, excluded samples get 0, and a row with fewer than 2 valid
    samples gets 0 throughout (no group to compare with).
    """
    rewards = np.asarray(rewards, np.float64)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [prompts, samples], got shape {rewards.shape}")
    fn = lookup(ADVANTAGE_ESTIMATORS, kind, "rl.advantage")
    g = rewards.shape[-1]
    if g < 2:  # every estimator is group-relative: one sample is its own baseline, advantage 0, no signal
        raise ValueError(f"rl.advantage={kind!r} needs at least 2 samples per prompt (rl.num_samples), got {g}")
    if kind == "grpo" and g - std_ddof < 1:
        raise ValueError(f"rl.std_ddof={std_ddof} needs more than {std_ddof} samples per prompt, got {g}")
    if not np.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or Inf; every sample needs a finite reward")
    out = np.zeros_like(rewards)
    if valid is None:
        valid = np.ones(rewards.shape, bool)
    valid = np.asarray(valid, bool)
    if valid.shape != rewards.shape:
        raise ValueError(f"valid has shape {valid.shape}, rewards {rewards.shape}")
    full = valid.all(axis=-1)
    if full.any():
        out[full] = fn(rewards[full], std_eps, std_ddof)
    for p in np.flatnonzero(~full):  # rows with excluded samples: the estimator over the valid ones
        keep = valid[p]
        if keep.sum() >= max(2, std_ddof + 1):
            out[p, keep] = fn(rewards[p, keep][None], std_eps, std_ddof)[0]
    spread = np.where(valid, rewards, -np.inf).max(-1) - np.where(valid, rewards, np.inf).min(-1)
    out[spread <= 0] = 0.0
    return out.astype(np.float32)


def zero_variance_groups(rewards: np.ndarray, tol: float = 0.0) -> np.ndarray:
    """Bool [P]: groups whose rewards all lie within `tol` of each other (no learning signal)."""
    rewards = np.asarray(rewards, np.float64)
    return (rewards.max(axis=-1) - rewards.min(axis=-1)) <= tol


def advantage_stats(rewards: np.ndarray, advantages: np.ndarray) -> dict[str, np.ndarray]:
    """Scalars for the metrics: reward and advantage mean/std/min/max, the zero-variance groups (fraction and
    count, over every sample's reward) and no_signal_groups (groups whose advantages are all 0: no gradient)."""
    rewards = np.asarray(rewards, np.float32)
    advantages = np.asarray(advantages, np.float32)
    out = {}
    for name, x in (("reward", rewards), ("advantage", advantages)):
        out.update({f"{name}_mean": x.mean(), f"{name}_std": x.std(), f"{name}_min": x.min(), f"{name}_max": x.max()})
    zv = zero_variance_groups(rewards)
    out["zero_variance_frac"] = np.float32(zv.mean())
    out["zero_variance_groups"] = np.int32(zv.sum())
    # the groups the update gets no gradient from, by the estimator's own verdict: every advantage 0 (zero variance
    # among the counted samples, fewer than 2 counted, or filled by dynamic sampling); zero_variance_groups above
    # reads every sample's reward, also the ones the baseline leaves out (env errors, filtered truncations)
    if advantages.ndim == rewards.ndim:
        out["no_signal_groups"] = np.int32((~(advantages != 0).any(axis=-1)).sum())
    return out
