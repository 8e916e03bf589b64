"""Minibatch updates (`rl.ppo_minibatches` = n): one step's batch as n sequential optimizer updates.

AReaL's `ppo_n_minibatches` (default 4): the batch is cut into n minibatches and each is one optimizer update,
while the old (behaviour) and proximal log-probs stay those computed once before the first update. The first
minibatch's ratio to the proximal policy is therefore 1 (clip fraction 0); from the second on the params have
moved and the clip bounds the movement since the proximal policy. With one update per batch (n = 1, the papers'
GRPO) the decoupled objective's clip never acts. n = 1 is the synchronous loop bit for bit: nothing here runs.

Normalisation. Each minibatch's loss is its own aggregate (`grpo_loss`: token-mean over its tokens, or a mean
over its active sequences) times `scale_i = n * W_i / W`, W_i its `aggregation_weight` and W the whole batch's.
So every token (sequence) carries the weight n / W in whichever minibatch it falls, the n minibatch losses
average to the whole batch's loss at the proximal params, and a minibatch with fewer counted tokens (truncated
rows compact-filtered, short completions) is not inflated. AReaL divides each minibatch by its own count
(`train_batch`'s `loss_weight_fn` summed over that minibatch's micro-batches), i.e. scale_i = 1: the two agree
when the minibatches hold equal weight (equal token counts); where they differ AReaL weighs a token of a short
minibatch more. A minibatch with no counted token gets scale 0 (a zero gradient; Adam's moments still step).
An update's logged `loss` is its scaled share; its `pg_loss` and the other metrics are its minibatch's own. The
rows are cut into contiguous blocks (AReaL balances its minibatches' token counts instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from swerl_jax.rl.objectives import aggregation_weight, compact_filter_mask
from swerl_jax.train_step import default_reduction

SCALE_KEY = "loss_scale"  # per-row copy of its minibatch's scale (rows shard over the batch axes; a scalar cannot)


def check_minibatches(rows: int, n: int, micro_batch_size: int, local_rows: int | None = None) -> None:
    """Raise ValueError naming rl.ppo_minibatches unless n >= 1 splits `rows` (and its micro-batches, and this
    process's `local_rows`: each process cuts its own rows) evenly."""
    if n < 1:
        raise ValueError(f"rl.ppo_minibatches must be >= 1 (1: one update per step's batch), got {n}")
    if rows % n:
        raise ValueError(f"rl.ppo_minibatches={n} does not divide the step's {rows} rows (rl.prompts_per_step x "
                         "rl.num_samples)")
    if local_rows is not None and local_rows % n:
        raise ValueError(f"rl.ppo_minibatches={n} does not divide this process's {local_rows} rows (its share of "
                         "rl.prompts_per_step x rl.num_samples)")
    if n > 1 and micro_batch_size > 0 and (rows // n) % micro_batch_size and micro_batch_size < rows // n:
        raise ValueError(f"rl.micro_batch_size={micro_batch_size} does not divide a minibatch's {rows // n} rows "
                         f"(rl.ppo_minibatches={n})")


def loss_scales(mask: np.ndarray, truncated: np.ndarray, n: int, loss_agg: str, seq_mean_rows: str,
                compact_filtering: bool) -> np.ndarray:
    """[n] float32 `n * W_i / W` of the n contiguous row blocks of `mask` [B, T] (see the module docstring).

    W_i is `objectives.aggregation_weight` of block i after compact filtering, summed over processes (each
    process passes its rows; block i of the global batch is every process's block i); W is their sum.
    """
    mask = np.asarray(mask, np.float32)
    if compact_filtering:
        mask = np.asarray(compact_filter_mask(mask, np.asarray(truncated)))
    blocks = np.split(mask, n)
    weights = np.asarray([float(aggregation_weight(b, loss_agg, seq_mean_rows)) for b in blocks], np.float64)
    weights = gather_over_processes(weights).sum(axis=0)
    total = weights.sum()
    if total <= 0:  # nothing counts anywhere: every minibatch's loss is 0 whatever the scale
        return np.zeros(n, np.float32)
    return (n * weights / total).astype(np.float32)


def split(batch: dict[str, np.ndarray], n: int, scales: np.ndarray) -> list[dict[str, np.ndarray]]:
    """The n contiguous row blocks of `batch` (every array's first axis), each with its `SCALE_KEY` rows.

    Contiguous blocks keep a prompt's samples together when n divides rl.prompts_per_step; the advantages were
    computed over the whole batch before the split, so the grouping does not change them.
    """
    parts = [dict(zip(batch, vals)) for vals in zip(*(np.split(np.asarray(v), n) for v in batch.values()))]
    for part, scale in zip(parts, scales):
        rows = next(iter(part.values())).shape[0]
        part[SCALE_KEY] = np.full(rows, scale, np.float32)
    return parts


def scale_loss(loss: jax.Array, batch: dict[str, Any]) -> jax.Array:
    """`loss` times its minibatch's scale when the batch carries one (n > 1), else `loss` untouched."""
    if SCALE_KEY not in batch:
        return loss
    return loss * batch[SCALE_KEY].max()  # every row holds the same value: max is exact where a mean might round


def gather_over_processes(x: np.ndarray) -> np.ndarray:
    """[processes, *x.shape]: every process's `x` (x[None] in one process)."""
    x = np.asarray(x)
    if jax.process_count() == 1:
        return x[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x))


def make_parts(batch: dict[str, np.ndarray], n: int, loss_cfg: Any) -> list[dict[str, np.ndarray]]:
    """A step's host batch as its updates' inputs: [batch] itself at n = 1 (no scale key: the synchronous loop bit
    for bit), else the n row blocks (`split`) with their `loss_scales` (`loss_cfg`: an `objectives.GRPOLossConfig`)."""
    if n == 1:
        return [batch]
    scales = loss_scales(batch["loss_mask"], batch["truncated"], n, loss_cfg.loss_agg, loss_cfg.seq_mean_rows,
                         loss_cfg.compact_filtering)
    return split(batch, n, scales)


def run_updates(step_fn: Callable, state: Any, parts: list, epochs: int) -> tuple[Any, dict, Any, list[dict]]:
    """Every update of one step: parts[0], then `later_updates`. One function for the trainer and the tests that
    check its objective against a reference (tests/rl/test_trainer_objective_reference.py).

    Returns (state, the first update's host metrics, the last update's metrics (None if there was one update only),
    the later updates' host metrics as `later_updates`).
    """
    state, first = step_fn(state, parts[0])
    first = jax.device_get(first)  # update 1: the on-policy figures (mismatch, ratio 1)
    state, last, updates = later_updates(step_fn, state, parts, epochs)
    return state, first, last, updates


def later_updates(step_fn: Callable, state: Any, parts: list, epochs: int) -> tuple[Any, Any, list[dict]]:
    """Run the updates after a step's first: parts[1:], then `epochs - 1` more passes over all parts.

    Returns (state, the last update's metrics (None if there was none), the host metrics of every update when
    there are several parts, else [] (one part: `rl.update_epochs` alone, logged as last_epoch/* as before)).
    """
    last, updates = None, []
    for epoch in range(epochs):
        for part in parts[1 if epoch == 0 else 0:]:
            state, last = step_fn(state, part)
            if len(parts) > 1:
                updates.append(last)
    return state, last, jax.device_get(updates)


def later_update_metrics(updates: list[dict]) -> dict[str, float]:
    """Mean and max over the updates after a step's first (its other minibatches, later epochs) of the figures
    that show the clip acting: `later_updates/{clip_frac,dual_clip_frac,ratio_max,approx_kl}_{mean,max}`."""
    out: dict[str, float] = {}
    if not updates:
        return out
    for key in ("clip_frac", "dual_clip_frac", "ratio_max", "approx_kl"):
        values = [float(u[key]) for u in updates if key in u]
        if values:
            out[f"later_updates/{key}_mean"] = float(np.mean(values))
            out[f"later_updates/{key}_max"] = float(np.max(values))
    return out


ROW_MEANS = ("truncated_frac", "filtered_frac")  # means over rows, not tokens


def metric_reduction(name: str) -> str:
    """How micro-batches' values of a `grpo_loss` / `logprob_mismatch` metric combine into the whole batch's
    (`train_step.accumulate_gradients`): counts add up, maxima take the largest, pg_loss is weighted as the loss,
    row fractions by rows, the sampler mismatch (over `loss_mask`) by `num_loss_tokens`, and every other metric,
    a token mean over the filtered mask (kl, entropy, clip and ratio figures), by `num_tokens`. Weighting them
    all as the loss (by sequences under a sequence-mean loss) made kl, entropy and the clip fractions depend on
    rl.micro_batch_size, and averaged maxima and counts."""
    kind = default_reduction(name, "loss_weight")  # counts and maxima, as any loss's
    if kind != "loss_weight" or name == "pg_loss":
        return kind
    if name in ROW_MEANS:
        return "mean"  # micro-batches hold equal row counts
    if "logprob_" in name:
        return "num_loss_tokens"
    return "num_tokens"
