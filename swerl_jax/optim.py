"""The optimizer from the `optim` config section: AdamW, warmup + constant/cosine schedule, clipping, accumulation.

    optimizer = make_optimizer(config.optim, num_steps=config.rl.num_steps)

The chain is clip_by_global_norm(optim.grad_clip) -> AdamW(schedule), wrapped in `optax.MultiSteps` when
optim.grad_accum_steps > 1 (gradients of k consecutive `update` calls are averaged into one AdamW step; the
schedule then advances once per real step: `num_steps`, the `update` calls of the run, is num_steps // k real
steps; warmup counts real steps). Weight decay skips norm
scales and biases (params named "scale", "*_scale" or "*_bias": Qwen3's q/k norms, Qwen2's q/k/v biases), as is
usual for Llama and Qwen. optim.skip_nonfinite = n > 0 wraps the update in
`optax.apply_if_finite`: an update with NaN/Inf gradients is skipped (at most n in a row).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

SCHEDULES = ("constant", "cosine")


def make_schedule(optim_cfg: Any, num_steps: int, learning_rate: float | None = None,
                  warmup_steps: int | None = None) -> optax.Schedule:
    """Learning rate per optimizer update (count from 0): linear warmup lr * (count + 1) / warmup_steps for the
    first optim.warmup_steps updates, then constant, or cosine decay to lr * optim.final_lr_ratio at `num_steps`.

    `learning_rate` overrides optim.learning_rate (the SFT stage passes sft.learning_rate), `warmup_steps`
    optim.warmup_steps (GRPO passes rl.warmup_steps when it is set).
    """
    lr = float(optim_cfg.learning_rate if learning_rate is None else learning_rate)
    warmup = int(optim_cfg.warmup_steps if warmup_steps is None else warmup_steps)
    kind = str(optim_cfg.schedule)
    if lr < 0:
        raise ValueError(f"optim.learning_rate must be >= 0, got {lr}")
    if warmup < 0:
        raise ValueError(f"optim.warmup_steps must be >= 0, got {warmup}")
    if kind not in SCHEDULES:
        raise ValueError(f"optim.schedule={kind!r} is not one of {SCHEDULES}")
    if kind == "constant":
        after = optax.constant_schedule(lr)
    else:
        if num_steps <= warmup:
            raise ValueError(f"optim.schedule='cosine' needs num_steps ({num_steps}) > optim.warmup_steps ({warmup})")
        final = lr * float(optim_cfg.final_lr_ratio)
        after = optax.cosine_decay_schedule(lr, decay_steps=num_steps - warmup, alpha=final / lr if lr else 0.0)
    if warmup == 0:
        return after

    def schedule(count: jax.Array) -> jax.Array:
        # warmup lr * (count + 1) / warmup: the first update already moves (optax's linear warmup starts at 0,
        # wasting it) and update warmup - 1 reaches lr; the decay then starts from lr at count = warmup
        warm = lr * jnp.minimum(1.0, (count + 1) / warmup)
        return jnp.where(count < warmup, warm, after(jnp.maximum(count - warmup, 0)))

    return schedule


def _decay_mask(params: Any) -> Any:
    """True for every parameter except RMSNorm scales and biases (decaying a norm scale towards 0 only hurts)."""
    def exempt(key: Any) -> bool:
        return isinstance(key, str) and (key == "scale" or key.endswith(("_scale", "_bias")))

    def keep(path: tuple, _: Any) -> bool:
        return not any(exempt(getattr(k, "key", None)) for k in path)

    return jax.tree_util.tree_map_with_path(keep, params)


def make_optimizer(optim_cfg: Any, num_steps: int, learning_rate: float | None = None,
                   warmup_steps: int | None = None) -> optax.GradientTransformation:
    """clip(global norm) -> AdamW with `make_schedule`, accumulated over optim.grad_accum_steps calls.

    Args:
      optim_cfg: the `optim` section (learning_rate, warmup_steps, schedule, b1, b2, weight_decay, grad_clip,
        grad_accum_steps; optional eps, final_lr_ratio, skip_nonfinite).
      num_steps: `update` calls in the run (each trainer update); the cosine horizon is num_steps //
        optim.grad_accum_steps real AdamW steps.
      learning_rate: overrides optim.learning_rate.
      warmup_steps: overrides optim.warmup_steps.
    """
    accum = int(optim_cfg.grad_accum_steps)
    clip = float(optim_cfg.grad_clip)
    if accum < 1:
        raise ValueError(f"optim.grad_accum_steps must be >= 1, got {accum}")
    if clip < 0:
        raise ValueError(f"optim.grad_clip must be >= 0 (0: off), got {clip}")
    for key in ("b1", "b2"):
        if not 0 <= float(getattr(optim_cfg, key)) < 1:
            raise ValueError(f"optim.{key} must be in [0, 1), got {getattr(optim_cfg, key)}")
    # MultiSteps steps the inner schedule once per k calls: the horizon in real steps is num_steps // k (every
    # caller passes its calls; with the calls as horizon a k = 2 cosine run ended at half the peak lr, not decayed)
    horizon = max(1, num_steps // accum)
    adamw = optax.adamw(make_schedule(optim_cfg, horizon, learning_rate, warmup_steps), b1=float(optim_cfg.b1),
                        b2=float(optim_cfg.b2), eps=float(optim_cfg.eps),
                        weight_decay=float(optim_cfg.weight_decay), mask=_decay_mask)
    tx = optax.chain(optax.clip_by_global_norm(clip), adamw) if clip > 0 else adamw
    skips = int(optim_cfg.skip_nonfinite)
    if skips < 0:
        raise ValueError(f"optim.skip_nonfinite must be >= 0 (0: off), got {skips}")
    if skips:
        # NaN/Inf gradients leave params and moments untouched (state.notfinite_count counts them); after
        # `skips` consecutive bad updates the update goes through, so a run that is truly broken still fails
        tx = optax.apply_if_finite(tx, max_consecutive_errors=skips)
    if accum > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=accum).gradient_transformation()
    return tx
