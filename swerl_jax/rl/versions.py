"""Sampler/trainer log-prob mismatch against each rollout's own policy version (rl.max_staleness = k >= 1).

At k = 0 every rollout was sampled by the params the trainer holds before the update, so the sampler's log-probs
against the trainer's measure numerics alone (`logprob_*`, in the loss; ~1e-5). At k >= 1 a rollout may be up to k
versions old, and against the trainer's current params the same comparison measures mostly staleness. So there:

  logprob_*        the sampler's log-probs against the trainer's under the params of the rollout's own version
                   (numerics, the same meaning as at k = 0); logprob_checked_frac: the share of loss tokens whose
                   version's params were held (the rest are left out of logprob_*, not compared to other params)
  stale_logprob_*  the sampler's against the trainer's current params (staleness plus numerics; the loss's figure)

Under top-k/top-p the sampler reports the truncated distribution's log-probs (the one it sampled) and the trainer
the full one's, so there `logprob_*` also hold the log of the kept mass (at k = 0 as well).

`KeptVersions` holds device copies of the params of the last k versions (k copies of the params: the price of an
exact numerics figure at k >= 1). A rollout's `policy_version` is its oldest version (an agent episode streamed
across versions: its first turn's), so a streamed episode's later turns add staleness to its `logprob_*`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from swerl_jax.rl.minibatch import gather_over_processes


class KeptVersions:
    """Device copies of the trainer's params as of the last `k` policy versions."""

    def __init__(self, k: int) -> None:
        """Keep at most `k` versions (rl.max_staleness)."""
        self.k = int(k)
        self.params: dict[int, Any] = {}

    def keep(self, version: int, params: Any) -> None:
        """Copy `params` as `version` (a copy: the trainer's state is donated to the update) and drop versions a
        later batch can no longer hold (older than version + 1 - k)."""
        self.params[int(version)] = jax.tree.map(lambda x: x.copy(), params)
        for v in [v for v in self.params if v <= version - self.k]:
            del self.params[v]

    def get(self, version: int) -> Any:
        """The params of `version`, or None when they are not held."""
        return self.params.get(int(version))


def own_version_logprobs(versions: np.ndarray, current_version: int, current_params: Any, kept: KeptVersions,
                         logprobs: Callable[[Any], np.ndarray], rows_shape: Sequence[int],
                         known: dict[int, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(log-probs [B, T] of each row under its rollout's version, held [B] bool).

    `versions` [B]: this process's rows' versions; `logprobs(params)` scores the whole batch (a collective
    program: every process runs it for the same versions, their union over processes, in the same order);
    `known` maps a version to log-probs already computed (e.g. the proximal ones, under the current params).
    """
    present = np.zeros(kept.k + 1, np.int64)  # versions current - k .. current
    for v in np.unique(versions):
        if 0 <= current_version - v <= kept.k:
            present[current_version - v] = 1
    present = gather_over_processes(present).sum(axis=0)
    out = np.zeros(rows_shape, np.float32)
    held = np.zeros(len(versions), bool)
    for age in range(kept.k + 1):
        v = current_version - age
        params = current_params if age == 0 else kept.get(v)
        if not present[age] or params is None:
            continue
        lp = known[v] if known and v in known else logprobs(params)
        rows = versions == v
        out[rows], held[rows] = lp[rows], True
    return out, held


def mismatch_metrics(sampler_logp: np.ndarray, trainer_logp: np.ndarray, mask: np.ndarray, held: np.ndarray
                     ) -> dict[str, float]:
    """`objectives.logprob_mismatch`'s figures over the held rows' masked tokens, over every process (float64 on
    the host), plus logprob_checked_frac."""
    mask = np.asarray(mask, np.float64) > 0
    on = mask & held[:, None]
    d = np.where(on, np.asarray(trainer_logp, np.float64) - np.asarray(sampler_logp, np.float64), 0.0)
    local = np.asarray([np.abs(d).sum(), (np.exp(d) - d - 1.0).sum(), np.where(on, np.exp(d), 0.0).sum(), on.sum(),
                        mask.sum(), np.abs(d).max(initial=0.0)])
    every = gather_over_processes(local)
    sums, worst = every[:, :5].sum(axis=0), every[:, 5].max()
    n = max(sums[3], 1.0)
    return {"logprob_abs_diff": float(sums[0] / n), "logprob_max_abs_diff": float(worst),
            "logprob_kl_k3": float(sums[1] / n), "logprob_ratio_mean": float(sums[2] / n),
            "logprob_checked_frac": float(sums[3] / max(sums[4], 1.0))}


def own_version_mismatch(kept: KeptVersions, current_version: int, current_params: Any, versions: Sequence[int],
                         batch: dict[str, np.ndarray], logprobs: Callable[[Any], np.ndarray]) -> dict[str, float]:
    """`mismatch_metrics` of a batch (build_train_batch's rows, with sampler_logp and, under the decoupled loss,
    prox_logp: the current params' log-probs, reused) against each row's version, then keep `current_params` as
    `current_version` for the next steps. Call before the update (the update donates the params)."""
    known = {current_version: batch["prox_logp"]} if "prox_logp" in batch else None
    own, held = own_version_logprobs(np.asarray(versions), current_version, current_params, kept, logprobs,
                                     batch["sampler_logp"].shape, known)
    kept.keep(current_version, current_params)
    return mismatch_metrics(batch["sampler_logp"], own, batch["loss_mask"], held)
