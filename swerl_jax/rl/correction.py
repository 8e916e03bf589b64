"""The sampler/trainer mismatch, measured (`logprob_mismatch`) and corrected (`rl.mismatch_correction`).

rl.mismatch_correction = off | tis | mis, with the cap rl.mismatch_cap.

The sampler's behaviour log-probs and the trainer's differ even for the same weights (another dtype, kernels,
batch shapes), and more so for stale weights. Per token, w = pi_trainer / pi_sampler = exp(trainer - sampler),
where "trainer" is the proximal policy: the trainer's params before this step's update (a constant):
  tis  truncated importance sampling (Yao et al. 2025; verl rollout_corr "token" truncate, SkyRL TIS):
       the per-token loss times min(w, cap);
  mis  masked importance sampling (the same authors' follow-up; verl's token mask mode): times w where w <= cap,
       0 where w > cap. A masked token stays in the aggregate's count (as AReaL's behaviour-weight cap), so
       micro-batch weights need no change; `mismatch_masked_frac` reports how many.
Both weights are constants (no gradient flows through them). `off` is the identity: nothing here runs.

The clipped surrogate then takes its ratio against the trainer's own log-probs before the update (pi_theta /
pi_prox), under rl.off_policy="plain" too: with rl.old_logprobs="sampler" (the default) the plain ratio is
against the sampler's, which already carries the mismatch, and weighting it by w as well counted it twice.
Under rl.off_policy="decoupled" the behaviour weight pi_prox / pi_behav is this same ratio, so the correction
replaces it (applying both would correct twice): tis truncates it at the cap, mis drops tokens over the cap, and
rl.behav_weight_cap is not used.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

MISMATCH_CORRECTIONS = ("off", "tis", "mis")


def check_mismatch_correction(mode: str, cap: float) -> None:
    """Raise ValueError naming `rl.mismatch_correction` / `rl.mismatch_cap` when they do not fit."""
    if mode not in MISMATCH_CORRECTIONS:
        raise ValueError(f"rl.mismatch_correction must be one of {MISMATCH_CORRECTIONS}, got {mode!r}")
    if mode != "off" and not cap > 1.0:
        raise ValueError(f"rl.mismatch_cap must be > 1 with rl.mismatch_correction={mode!r}, got {cap}")


def mismatch_weight(trainer_logp: Array, sampler_logp: Array, mask: Array, mode: str, cap: float,
                    log_ratio_clamp: float = 20.0) -> tuple[Array, dict[str, Array]]:
    """The per-token correction weight [B, T] (no gradient) and its metrics.

    Args:
      trainer_logp: [B, T] the sampled tokens' log-probs under the trainer's params before the update.
      sampler_logp: [B, T] the sampler's (behaviour) log-probs of the same tokens.
      mask: [B, T] the tokens that count; padding may hold anything (zeroed before exp).
      mode: "tis" or "mis" (`MISMATCH_CORRECTIONS`; "off" is never passed: the loss skips the correction).
      cap: C > 1.

    Returns (weight: tis min(w, C), mis w * [w <= C], 0 off the mask; metrics: mismatch_ratio_mean and
    mismatch_ratio_max (w before the cap, over the mask), mismatch_capped_frac (tis: tokens with w > C, whose
    weight is truncated) or mismatch_masked_frac (mis: tokens dropped)).
    """
    check_mismatch_correction(mode, cap)
    if mode == "off":
        raise ValueError("mismatch_weight: rl.mismatch_correction='off' applies no weight")
    mask = mask.astype(jnp.float32)
    on = mask > 0
    log_w = jnp.where(on, jax.lax.stop_gradient(trainer_logp) - jax.lax.stop_gradient(sampler_logp), 0.0)
    w = jnp.exp(jnp.clip(log_w, -log_ratio_clamp, log_ratio_clamp))  # the clamp only keeps exp finite
    over = on & (w > cap)
    weight = jnp.minimum(w, cap) if mode == "tis" else jnp.where(over, 0.0, w)
    weight = jnp.where(on, weight, 0.0)
    count = jnp.maximum(mask.sum(), 1.0)
    frac = jnp.sum(over.astype(jnp.float32)) / count
    metrics = {"mismatch_ratio_mean": jnp.sum(jnp.where(on, w, 0.0)) / count,
               "mismatch_ratio_max": jnp.max(jnp.where(on, w, 0.0)),
               "mismatch_capped_frac" if mode == "tis" else "mismatch_masked_frac": frac}
    return weight, metrics


def logprob_mismatch(sampler_logp: Array, trainer_logp: Array, mask: Array) -> dict[str, Array]:
    """How far the sampler's log-probs are from the trainer's for the same tokens (numerics, stale weights).

    Returns token-means over the mask: logprob_abs_diff, logprob_max_abs_diff (max), logprob_kl_k3 (the k3
    estimate of KL(sampler || trainer) from the sampler's tokens, >= 0) and the mean importance ratio
    exp(trainer - sampler).
    """
    mask = mask.astype(jnp.float32)
    on = mask > 0
    d = jnp.where(on, trainer_logp - sampler_logp, 0.0)
    return {
        "logprob_abs_diff": _masked_mean(jnp.abs(d), mask),
        "logprob_max_abs_diff": jnp.max(jnp.abs(d)),
        "logprob_kl_k3": _masked_mean(jnp.exp(d) - d - 1.0, mask),
        "logprob_ratio_mean": _masked_mean(jnp.exp(d), mask),
    }


def _masked_mean(x: Array, mask: Array) -> Array:
    return jnp.sum(x * mask) / jnp.maximum(mask.sum(), 1.0)
