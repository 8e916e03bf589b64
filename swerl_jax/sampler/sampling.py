"""Token selection from logits: temperature, top-k, top-p (nucleus), greedy; per-row parameters and keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def filter_logits(scaled: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Set logits outside each row's top-k, then outside its top-p nucleus, to -inf (HF's warper order).

    Args:
      scaled: [rows, vocab] temperature-scaled logits.
      top_k: [rows] int, 0 = no top-k.
      top_p: [rows] float in (0, 1], 1 = no nucleus filter. The nucleus is the smallest prefix of the
        descending-sorted (top-k renormalised) distribution whose mass reaches top_p; the top token is kept.
    """
    vocab = scaled.shape[-1]
    desc = -jnp.sort(-scaled, axis=-1)
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
    ranks = jnp.arange(vocab)[None, :]
    desc = jnp.where(ranks < k[:, None], desc, -jnp.inf)
    probs = jax.nn.softmax(desc, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep = (mass_before < top_p[:, None]) & (ranks < k[:, None])
    kept = jnp.sum(keep, axis=-1)  # >= 1: rank 0 has no mass before it
    threshold = jnp.take_along_axis(desc, (kept - 1)[:, None], axis=-1)
    return jnp.where(scaled >= threshold, scaled, -jnp.inf)


def sample_tokens(logits: jax.Array, keys: jax.Array, temperature: jax.Array, top_p: jax.Array,
                  top_k: jax.Array, use_filters: bool) -> tuple[jax.Array, jax.Array]:
    """Sample one token per row and return (tokens [rows] int32, log-probs [rows] fp32).

    Rows with temperature <= 0 take the argmax. The log-prob is log_softmax(logits / T) at the chosen token
    (T = 1 for greedy rows), i.e. under the temperature-scaled distribution before top-k/top-p truncation:
    the quantity the trainer recomputes with `token_logprobs(..., temperature=T)`.

    Args:
      logits: [rows, vocab] fp32.
      keys: [rows] PRNG keys, one per row (so a row's draw does not depend on the rest of the batch).
      temperature, top_p, top_k: [rows] per-row parameters.
      use_filters: static; False skips the vocabulary sort when no row uses top-k/top-p.
    """
    greedy = temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, temperature)[:, None]
    logp_all = jax.nn.log_softmax(scaled, axis=-1)
    candidates = filter_logits(scaled, top_k, top_p) if use_filters else scaled
    gumbel = jax.vmap(lambda k: jax.random.gumbel(k, scaled.shape[-1:], jnp.float32))(keys)
    sampled = jnp.argmax(candidates + gumbel, axis=-1)
    tokens = jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)
    return tokens, jnp.take_along_axis(logp_all, tokens[:, None], axis=-1)[:, 0]
