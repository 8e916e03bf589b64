"""GRPOLossConfig for unit tests of the loss: every field written out (the dataclass has no defaults; an experiment's
values come from experiments/base.py), as the plain clipped GRPO loss unless a test overrides a field."""

import dataclasses

from swerl_jax.rl.objectives import GRPOLossConfig

PLAIN = {"clip_eps_low": 0.2, "clip_eps_high": 0.2, "dual_clip": 0.0, "kl_coef": 0.0, "kl_estimator": "k3",
         "loss_agg": "token-mean", "loss_norm": 0.0, "entropy_coef": 0.0, "compact_filtering": False,
         "seq_mean_rows": "active"}


def loss_config(**overrides) -> GRPOLossConfig:
    """The plain clipped loss (no KL, no entropy, token-mean) with `overrides`."""
    unknown = set(overrides) - {f.name for f in dataclasses.fields(GRPOLossConfig)}
    if unknown:
        raise TypeError(f"not GRPOLossConfig fields: {sorted(unknown)}")
    return GRPOLossConfig(**{**PLAIN, **overrides})
