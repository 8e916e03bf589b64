"""KL estimators of KL(pi || ref) from the sampled tokens' log-probs (rl.kl_estimator; Schulman's k1, k2, k3).

    kl = kl_penalty(logp, ref_logp, "k3", mask)       # per token [B, T], 0 where mask is 0

The registry `KL_ESTIMATORS` is looked up by name: an ablation adds one `@register_kl("name")` function.
Formulas: k1 logp - ref; k2 0.5 (logp - ref)^2; k3 exp(ref - logp) - (ref - logp) - 1.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from swerl_jax.rl.advantages import lookup, register_in

Array = jax.Array

KL_ESTIMATORS: dict[str, Callable[[Array, Array], Array]] = {}


def register_kl(name: str) -> Callable[[Callable], Callable]:
    """Decorator: `fn(logp, ref_logp) -> per-token KL` becomes `rl.kl_estimator=name`."""
    return register_in(KL_ESTIMATORS, name)


@register_kl("k1")
def _k1(logp: Array, ref_logp: Array) -> Array:
    return logp - ref_logp


@register_kl("k2")
def _k2(logp: Array, ref_logp: Array) -> Array:
    return 0.5 * jnp.square(logp - ref_logp)


@register_kl("k3")
def _k3(logp: Array, ref_logp: Array) -> Array:
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


def kl_penalty(logp: Array, ref_logp: Array, estimator: str = "k3", mask: Array | None = None) -> Array:
    """Per-token KL(pi || ref) estimate from sampled tokens' log-probs; 0 where `mask` is 0.

    The masked-out positions are zeroed *before* the formula so padding (arbitrary log-probs) can never
    produce inf/NaN values or gradients.
    """
    fn = lookup(KL_ESTIMATORS, estimator, "rl.kl_estimator")
    if mask is None:
        return fn(logp, ref_logp)
    on = mask > 0
    return jnp.where(on, fn(jnp.where(on, logp, 0.0), jnp.where(on, ref_logp, 0.0)), 0.0)
