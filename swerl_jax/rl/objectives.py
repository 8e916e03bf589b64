"""GRPO objectives: group advantages, KL estimators, the clipped policy loss, loss aggregation, `grpo_loss`.

Everything here is a pure `jax.numpy` function of arrays (jit-able, masks everywhere), except the advantages
(`swerl_jax.rl.advantages`, re-exported here): float64 numpy on the host, see there why. Shapes:
rewards [P, G] (P prompts x G samples); per-token arrays [B, T] with B = P * G rows in (group, sample)
order and `mask` 1.0 on real completion tokens. Variants live in three registries (`ADVANTAGE_ESTIMATORS`,
`KL_ESTIMATORS`, `LOSS_AGGREGATORS`) so an ablation adds one decorated function and a config string.

Formulas (DESIGN.md, "Reference facts"):
  advantages   grpo (r - mean) / (std + eps); drgrpo r - mean; loo r_i - mean_{j != i} r_j
  KL           k1 logp - ref; k2 0.5 (logp - ref)^2; k3 exp(ref - logp) - (ref - logp) - 1
  policy loss  max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)), r = exp(logp - old_logp);
               dual clip (A < 0): min(that, -A c)
  decoupled    w * (policy loss with r = exp(logp - prox_logp)), w = exp(prox_logp - old_logp) (no gradient),
               w = 0 where w > cap (rl.off_policy="decoupled"; old_logp: the behaviour policy's)
  mismatch     times min(w, cap) (tis) or w [w <= cap] (mis), w = exp(prox_logp - sampler_logp) (no gradient;
               rl.mismatch_correction; under decoupled it replaces the behaviour weight: `rl.correction`)
  aggregation  token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm (token sum / norm)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from swerl_jax.rl.advantages import (  # noqa: F401  (re-exported: the advantage half of the objective)
    ADVANTAGE_ESTIMATORS,
    advantage_stats,
    group_advantages,
    lookup,
    register_advantage,
    register_in,
    zero_variance_groups,
)
from swerl_jax.rl.correction import (  # noqa: F401  (logprob_mismatch re-exported: the measured half)
    check_mismatch_correction,
    logprob_mismatch,
    mismatch_weight,
)
from swerl_jax.rl.kl import KL_ESTIMATORS, kl_penalty, register_kl  # noqa: F401  (re-exported: the KL term)

Array = jax.Array

LOSS_AGGREGATORS: dict[str, Callable[..., Array]] = {}


def register_loss_agg(name: str) -> Callable[[Callable], Callable]:
    """Decorator: `fn(per_token [B, T], mask [B, T], norm) -> scalar` becomes `rl.loss_agg=name`."""
    return register_in(LOSS_AGGREGATORS, name)


# ----------------------------------------------------------------------------------------------- policy loss

def policy_loss(logp: Array, old_logp: Array, advantages: Array, mask: Array, clip_eps_low: float = 0.2,
                clip_eps_high: float = 0.2, dual_clip: float = 0.0, log_ratio_clamp: float = 20.0
                ) -> tuple[Array, dict[str, Array]]:
    """PPO clipped surrogate per token, with separate low/high clip (clip-high) and optional dual clip.

    Args:
      logp, old_logp: [B, T] log-probs of the sampled tokens under the current and the behaviour policy.
      advantages: [B] (one per sequence) or [B, T].
      mask: [B, T], 1 on tokens that count.
      dual_clip: c > 1 bounds the loss of negative-advantage tokens by -A c (Ye et al. 2020); 0 turns it off.
      log_ratio_clamp: |logp - old_logp| is clamped here before exp, only so a wild ratio cannot overflow.

    Returns (per-token loss [B, T], 0 on masked tokens; metrics: clip_frac (tokens where the clipped term
    wins), clip_frac_low/high (ratio below 1 - eps_low / above 1 + eps_high and clipped), dual_clip_frac,
    ratio_mean, ratio_max, approx_kl (k3 of old vs new); all token-means over the mask).
    """
    if dual_clip and dual_clip <= 1.0:
        raise ValueError(f"rl.dual_clip must be 0 (off) or > 1, got {dual_clip}")
    mask = mask.astype(jnp.float32)
    on = mask > 0
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    adv = jnp.broadcast_to(adv.astype(jnp.float32), mask.shape)
    log_ratio = jnp.where(on, logp - old_logp, 0.0)
    log_ratio = jnp.clip(log_ratio, -log_ratio_clamp, log_ratio_clamp)
    ratio = jnp.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * jnp.clip(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    loss = jnp.maximum(unclipped, clipped)
    is_clipped = clipped > unclipped
    if dual_clip:
        bound = -adv * dual_clip
        dual = (adv < 0) & (loss > bound)
        loss = jnp.where(adv < 0, jnp.minimum(loss, bound), loss)
    else:
        dual = jnp.zeros_like(on)
    loss = jnp.where(on, loss, 0.0)
    mean = lambda x: masked_mean(x.astype(jnp.float32), mask)
    metrics = {
        "clip_frac": mean(is_clipped),
        "clip_frac_low": mean(is_clipped & (ratio < 1.0)),
        "clip_frac_high": mean(is_clipped & (ratio > 1.0)),
        "dual_clip_frac": mean(dual),
        "ratio_mean": mean(ratio),
        "ratio_max": jnp.max(jnp.where(on, ratio, 0.0)),
        "approx_kl": mean(jnp.exp(-log_ratio) + log_ratio - 1.0),
    }
    return loss, metrics


OFF_POLICY = ("plain", "decoupled")


def decoupled_policy_loss(logp: Array, prox_logp: Array, old_logp: Array, advantages: Array, mask: Array,
                          clip_eps_low: float = 0.2, clip_eps_high: float = 0.2, dual_clip: float = 0.0,
                          behav_weight_cap: float = 0.0, log_ratio_clamp: float = 20.0
                          ) -> tuple[Array, dict[str, Array]]:
    """AReaL's decoupled PPO loss (Fu et al. 2025; the proximal policy of Hilton et al. 2021), per token.

    The trust region is centred on the proximal policy (the trainer's params before this update), not on the
    possibly stale behaviour policy that sampled the tokens; the importance weight w = pi_prox / pi_behav corrects
    for the sampling. Both `prox_logp` and `old_logp` are constants: the gradient flows through `logp` only.

    Args:
      logp, prox_logp, old_logp: [B, T] log-probs of the sampled tokens under the current, the proximal and the
        behaviour (sampler's) policy.
      behav_weight_cap: tokens with w > cap get weight 0 (they stay in the mask: see below); 0 means no cap.
      The rest as `policy_loss`.

    Returns (per-token loss [B, T]; metrics: `policy_loss`'s, on the proximal ratio, plus behav_weight_mean /
    behav_weight_max (the weights before the cap) and behav_trunc_frac (tokens over the cap)).
    """
    prox_logp = jax.lax.stop_gradient(prox_logp)
    old_logp = jax.lax.stop_gradient(old_logp)
    loss, metrics = policy_loss(logp, prox_logp, advantages, mask, clip_eps_low, clip_eps_high, dual_clip,
                                log_ratio_clamp)
    mask = mask.astype(jnp.float32)
    on = mask > 0
    # Padding may carry arbitrary log-probs: zero them before exp; the clamp only keeps exp finite.
    log_w = jnp.clip(jnp.where(on, prox_logp - old_logp, 0.0), -log_ratio_clamp, log_ratio_clamp)
    weight = jnp.exp(log_w)
    trunc = on & (weight > behav_weight_cap) if behav_weight_cap > 0 else jnp.zeros_like(on)
    # As AReaL's `ppo_actor_loss_fn` (behav_mask = weight <= behav_imp_weight_cap): a token over the cap is
    # dropped (weight 0), not clipped to the cap, and it stays in the loss mask, so the aggregate still divides by
    # it and `aggregation_weight` (loss_weight for micro-batch accumulation) needs no change.
    loss = loss * jnp.where(trunc, 0.0, weight)
    metrics["behav_weight_mean"] = masked_mean(weight, mask)
    metrics["behav_weight_max"] = jnp.max(jnp.where(on, weight, 0.0))
    metrics["behav_trunc_frac"] = masked_mean(trunc.astype(jnp.float32), mask)
    return loss, metrics


# ------------------------------------------------------------------------------------------------ aggregation

def masked_mean(x: Array, mask: Array) -> Array:
    """Mean of x over mask > 0 (0 when the mask is empty)."""
    mask = mask.astype(jnp.float32)
    return jnp.sum(x * mask) / jnp.maximum(mask.sum(), 1.0)


def _seq_mean(per_seq: Array, mask: Array) -> Array:
    # Only sequences with at least one counted token enter the mean: rows masked out entirely (compact
    # filtering, batch padding) must not dilute it.
    active = (mask.sum(axis=-1) > 0).astype(jnp.float32)
    return jnp.sum(per_seq * active) / jnp.maximum(active.sum(), 1.0)


@register_loss_agg("token-mean")
def _token_mean(x: Array, mask: Array, norm: float) -> Array:
    del norm
    return masked_mean(x, mask)


@register_loss_agg("seq-mean-token-mean")
def _seq_mean_token_mean(x: Array, mask: Array, norm: float) -> Array:
    del norm
    return _seq_mean(jnp.sum(x * mask, axis=-1) / jnp.maximum(mask.sum(axis=-1), 1.0), mask)


@register_loss_agg("seq-mean-token-sum")
def _seq_mean_token_sum(x: Array, mask: Array, norm: float) -> Array:
    del norm
    return _seq_mean(jnp.sum(x * mask, axis=-1), mask)


@register_loss_agg("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(x: Array, mask: Array, norm: float) -> Array:
    if not norm or norm <= 0:
        raise ValueError(f"loss_agg 'seq-mean-token-sum-norm' needs a positive normaliser (rl.loss_norm), got {norm}")
    return _seq_mean(jnp.sum(x * mask, axis=-1) / norm, mask)


SEQ_MEAN_ROWS = ("active", "all")


def aggregate_loss(per_token: Array, mask: Array, mode: str = "token-mean", norm: float = 0.0,
                   rows: str = "active") -> Array:
    """Reduce a per-token [B, T] quantity to a scalar with one of `LOSS_AGGREGATORS` (masked).

    `norm` is the Dr.GRPO constant used by seq-mean-token-sum-norm (each sequence's token sum / norm).
    `rows` (`rl.seq_mean_rows`) is what a sequence mean divides by: "active" the rows with at least one
    masked-in token (ours: compact-filtered rows do not dilute it); "all" every row, filtered ones adding 0
    (DeepSWE's verl fork, `agg_loss` "seq-mean-token-sum-norm": row sums / padded width, mean over the batch).
    "all" rescales the active-row mean by active / B, which is exact for every sequence-mean aggregator.
    """
    fn = lookup(LOSS_AGGREGATORS, mode, "rl.loss_agg")
    mask = mask.astype(jnp.float32)
    out = fn(per_token, mask, norm)
    if rows == "active":
        return out
    if rows != "all" or mode == "token-mean":
        raise ValueError(f"rl.seq_mean_rows={rows!r} must be one of {SEQ_MEAN_ROWS} ('all' only with a sequence-mean "
                         f"rl.loss_agg, not {mode!r})")
    active = (mask.sum(axis=-1) > 0).sum(dtype=jnp.float32)
    return out * active / mask.shape[0]


def aggregation_weight(mask: Array, mode: str, rows: str = "active") -> Array:
    """What one batch's loss is a mean over: its token count (token-mean) or its active sequence count.

    Weighting micro-batches by this (`train_step.accumulate_gradients(weight_key=...)`) makes the
    accumulated loss equal the loss of the whole batch for every mode.
    """
    lookup(LOSS_AGGREGATORS, mode, "rl.loss_agg")
    mask = mask.astype(jnp.float32)
    if mode == "token-mean":
        return mask.sum()
    if rows == "all":  # every row counts in the denominator (rl.seq_mean_rows="all")
        return jnp.asarray(mask.shape[0], jnp.float32)
    return (mask.sum(axis=-1) > 0).sum(dtype=jnp.float32)


def negative_advantage_weight_max(per_token: Array, advantages: Array, mask: Array) -> Array:
    """The largest factor w with loss = -A w over the masked-in tokens of negative advantage (0 if none).

    Plain: the ratio (clipped, dual-clipped); decoupled: that times the behaviour weight. Nothing but the dual clip
    bounds it for A < 0 (the PPO clip only floors the ratio there), hence the metric.
    """
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    adv = jnp.broadcast_to(adv.astype(jnp.float32), mask.shape)
    neg = (mask > 0) & (adv < 0)
    return jnp.max(jnp.where(neg, per_token / jnp.where(neg, -adv, 1.0), 0.0))


def compact_filter_mask(mask: Array, truncated: Array) -> Array:
    """`mask` with every truncated completion's row zeroed (DeepSWE compact filtering)."""
    return mask * (~truncated.astype(bool))[:, None].astype(mask.dtype)


# --------------------------------------------------------------------------------------------- the GRPO loss

@dataclasses.dataclass(frozen=True)
class GRPOLossConfig:
    """The `rl` fields the loss reads (hashable, so it can be a static jit argument). No defaults (an experiment's
    come from `experiments/base.py` through `from_config`, so the loss and the config cannot disagree), except the
    off-policy and mismatch fields, which default to the synchronous loop's loss (plain, no cap, no correction) so
    direct callers keep it."""

    clip_eps_low: float
    clip_eps_high: float
    dual_clip: float
    kl_coef: float
    kl_estimator: str
    loss_agg: str
    loss_norm: float
    entropy_coef: float
    compact_filtering: bool
    seq_mean_rows: str
    off_policy: str = "plain"
    behav_weight_cap: float = 0.0
    mismatch_correction: str = "off"
    mismatch_cap: float = 0.0

    @classmethod
    def from_config(cls, config: Any) -> GRPOLossConfig:
        """From a root config (with `.rl` and `.sampler`) or an `rl` section alone.

        `rl.loss_norm = 0` means `sampler.max_new_tokens` (needs the root config for that mode).
        """
        rl = config.rl if hasattr(config, "rl") else config
        norm = float(rl.loss_norm)
        if norm == 0 and hasattr(config, "sampler"):
            norm = float(config.sampler.max_new_tokens)
        cfg = cls(clip_eps_low=float(rl.clip_eps_low), clip_eps_high=float(rl.clip_eps_high),
                  dual_clip=float(rl.dual_clip), kl_coef=float(rl.kl_coef), kl_estimator=str(rl.kl_estimator),
                  loss_agg=str(rl.loss_agg), loss_norm=norm, entropy_coef=float(rl.entropy_coef),
                  compact_filtering=bool(rl.compact_filtering), seq_mean_rows=str(rl.seq_mean_rows),
                  off_policy=str(rl.off_policy), behav_weight_cap=float(rl.behav_weight_cap),
                  mismatch_correction=str(rl.mismatch_correction), mismatch_cap=float(rl.mismatch_cap))
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raise ValueError naming the `rl.*` key of the first bad field."""
        lookup(KL_ESTIMATORS, self.kl_estimator, "rl.kl_estimator")
        lookup(LOSS_AGGREGATORS, self.loss_agg, "rl.loss_agg")
        if not (0 <= self.clip_eps_low < 1):
            raise ValueError(f"rl.clip_eps_low must be in [0, 1), got {self.clip_eps_low}")
        if self.clip_eps_high < 0:
            raise ValueError(f"rl.clip_eps_high must be >= 0, got {self.clip_eps_high}")
        if self.dual_clip and self.dual_clip <= 1:
            raise ValueError(f"rl.dual_clip must be 0 (off) or > 1, got {self.dual_clip}")
        if self.kl_coef < 0:
            raise ValueError(f"rl.kl_coef must be >= 0, got {self.kl_coef}")
        if self.seq_mean_rows not in SEQ_MEAN_ROWS:
            raise ValueError(f"rl.seq_mean_rows must be one of {SEQ_MEAN_ROWS}, got {self.seq_mean_rows!r}")
        if self.seq_mean_rows == "all" and self.loss_agg == "token-mean":
            raise ValueError("rl.seq_mean_rows='all' needs a sequence-mean rl.loss_agg, not 'token-mean'")
        if self.loss_agg == "seq-mean-token-sum-norm" and self.loss_norm <= 0:
            raise ValueError("rl.loss_agg='seq-mean-token-sum-norm' needs rl.loss_norm > 0 "
                             f"(or 0 with sampler.max_new_tokens set), got {self.loss_norm}")
        if self.off_policy not in OFF_POLICY:
            raise ValueError(f"rl.off_policy must be one of {OFF_POLICY}, got {self.off_policy!r}")
        if self.behav_weight_cap < 0 or 0 < self.behav_weight_cap <= 1:
            raise ValueError(f"rl.behav_weight_cap must be 0 (no cap) or > 1, got {self.behav_weight_cap}")
        check_mismatch_correction(self.mismatch_correction, self.mismatch_cap)

    @property
    def needs_reference(self) -> bool:
        """Whether the reference policy's log-probs are needed (beta > 0); at 0 it is never loaded."""
        return self.kl_coef > 0


def grpo_loss(logp: Array, old_logp: Array, ref_logp: Array | None, advantages: Array, mask: Array,
              cfg: GRPOLossConfig | Any, entropy: Array | None = None, truncated: Array | None = None,
              prox_logp: Array | None = None, sampler_logp: Array | None = None
              ) -> tuple[Array, dict[str, Array]]:
    """The GRPO objective: clipped surrogate + beta * KL(pi || ref) - entropy_coef * entropy, aggregated.

    Args:
      logp, old_logp: [B, T] sampled tokens' log-probs under the current / behaviour policy.
      prox_logp: [B, T] under the proximal policy (no gradient), needed by rl.off_policy="decoupled"; "plain"
        ignores it (its ratio is against old_logp) unless a mismatch correction is on (then against prox_logp).
        sampler_logp: [B, T] the sampler's, needed (with prox_logp) by rl.mismatch_correction.
      ref_logp: [B, T] under the reference policy, or None (required when cfg.kl_coef > 0).
      cfg: a GRPOLossConfig (hashable: a static jit argument), or a config converted by `from_config`.
      advantages: [B] or [B, T]. mask: [B, T] completion-token mask.
      entropy: [B, T] per-token policy entropy (needed when cfg.entropy_coef > 0; logged when given).
      truncated: [B] bool, completions that hit max_new_tokens (masked out when cfg.compact_filtering).

    Returns (scalar loss, metrics): pg_loss, kl, entropy (token-means), the policy-loss metrics (decoupled: on the
    proximal ratio, plus the behav_* ones; with a mismatch correction `mismatch_weight`'s instead),
    neg_adv_weight_max (`negative_advantage_weight_max`), num_tokens, num_seqs, loss_weight (`aggregation_weight`,
    for exact micro-batch accumulation) and filtered_frac. Under `accumulate_gradients(weight_key="loss_weight",
    reduction=minibatch.metric_reduction)` the loss and every metric are the whole batch's however it is split.
    """
    if not isinstance(cfg, GRPOLossConfig):  # a root config or its `rl` section
        cfg = GRPOLossConfig.from_config(cfg)
    mask = mask.astype(jnp.float32)
    metrics: dict[str, Array] = {}
    if truncated is not None:
        metrics["truncated_frac"] = truncated.astype(jnp.float32).mean()
    if cfg.compact_filtering:
        if truncated is None:
            raise ValueError("rl.compact_filtering=True needs the `truncated` flags of the completions")
        mask = compact_filter_mask(mask, truncated)
    correct = cfg.mismatch_correction != "off"
    if correct and (prox_logp is None or sampler_logp is None):
        raise ValueError(f"rl.mismatch_correction={cfg.mismatch_correction!r} needs the trainer's (prox_logp) and "
                         "the sampler's (sampler_logp) log-probs")
    if correct:  # the correction weight; under decoupled it replaces the behaviour weight (the same ratio)
        # against the trainer's own log-probs under plain too: old_logp's ratio already carries w (correction.py)
        base = jax.lax.stop_gradient(prox_logp)
        pg, pg_metrics = policy_loss(logp, base, advantages, mask, cfg.clip_eps_low, cfg.clip_eps_high,
                                     cfg.dual_clip)
        weight, mismatch_metrics = mismatch_weight(prox_logp, sampler_logp, mask, cfg.mismatch_correction,
                                                   cfg.mismatch_cap)
        pg = pg * weight
        pg_metrics.update(mismatch_metrics)
    elif cfg.off_policy == "decoupled":
        if prox_logp is None:
            raise ValueError("rl.off_policy='decoupled' needs the proximal policy's log-probs (prox_logp); "
                             "old_logp is the behaviour policy's")
        pg, pg_metrics = decoupled_policy_loss(logp, prox_logp, old_logp, advantages, mask, cfg.clip_eps_low,
                                               cfg.clip_eps_high, cfg.dual_clip, cfg.behav_weight_cap)
    else:  # plain: the synchronous loop's loss, unchanged; a prox_logp passed anyway is ignored
        pg, pg_metrics = policy_loss(logp, old_logp, advantages, mask, cfg.clip_eps_low, cfg.clip_eps_high,
                                     cfg.dual_clip)
    per_token = pg
    metrics.update(pg_metrics)
    metrics["neg_adv_weight_max"] = negative_advantage_weight_max(pg, advantages, mask)
    metrics["pg_loss"] = aggregate_loss(pg, mask, cfg.loss_agg, cfg.loss_norm, cfg.seq_mean_rows)
    if cfg.kl_coef > 0:
        if ref_logp is None:
            raise ValueError(f"rl.kl_coef={cfg.kl_coef} > 0 needs the reference log-probs (ref_logp)")
    if ref_logp is not None:
        kl = kl_penalty(logp, ref_logp, cfg.kl_estimator, mask)
        metrics["kl"] = masked_mean(kl, mask)
        if cfg.kl_coef > 0:
            per_token = per_token + cfg.kl_coef * kl
    if cfg.entropy_coef > 0 and entropy is None:
        raise ValueError(f"rl.entropy_coef={cfg.entropy_coef} > 0 needs the per-token entropy")
    if entropy is not None:
        entropy = jnp.where(mask > 0, entropy, 0.0)
        metrics["entropy"] = masked_mean(entropy, mask)
        if cfg.entropy_coef > 0:
            per_token = per_token - cfg.entropy_coef * entropy
    loss = aggregate_loss(per_token, mask, cfg.loss_agg, cfg.loss_norm, cfg.seq_mean_rows)
    active = mask.sum(axis=-1) > 0
    metrics["num_tokens"] = mask.sum()
    metrics["num_seqs"] = active.sum(dtype=jnp.float32)
    metrics["loss_weight"] = aggregation_weight(mask, cfg.loss_agg, cfg.seq_mean_rows)
    metrics["filtered_frac"] = 1.0 - active.mean(dtype=jnp.float32)
    return loss, metrics
