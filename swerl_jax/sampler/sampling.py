"""Token selection from logits: temperature, top-k, top-p (nucleus), greedy; per-row parameters and keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Vocabulary entries per block of the two-level inverse-CDF draw (SmolLM2's 49,152 = 192 blocks of 256).
BLOCK = 256


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


def pick(mass: jax.Array, u: jax.Array) -> jax.Array:
    """Inverse CDF per row: the first entry with mass > 0 whose cumulative mass reaches u x the row's total.

    Args:
      mass: [rows, n] non-negative, at least one positive entry per row.
      u: [rows] in (0, 1].

    Entries with zero mass are never returned, whatever the rounding of the cumulative sum (XLA:CPU computes a
    long cumsum as a blocked tree, so a zero entry can end up a rounding step above its predecessor).
    """
    cdf = jnp.where(mass > 0, jnp.cumsum(mass, axis=-1), -jnp.inf)
    target = u * jnp.max(cdf, axis=-1)
    return jnp.argmax(cdf >= target[:, None], axis=-1).astype(jnp.int32)


def categorical(mass: jax.Array, u: jax.Array) -> jax.Array:
    """Draw one index per row with probability mass / sum(mass), from two uniforms per row.

    Two-level inverse CDF: u[:, 0] picks a block of `BLOCK` entries in proportion to its mass, u[:, 1] an entry
    inside it in proportion to its mass, so P(i) = (M_b / M) (m_i / M_b) = m_i / M. Work is one pass over the
    vocabulary (block sums) plus two short cumulative sums, instead of a vocabulary-sized random draw (Gumbel-max)
    or a vocabulary-long cumsum.

    Args:
      mass: [rows, vocab] non-negative, at least one positive entry per row.
      u: [rows, 2] in (0, 1].
    """
    rows, vocab = mass.shape
    size = min(BLOCK, vocab)
    blocks = mass if vocab % size == 0 else jnp.pad(mass, ((0, 0), (0, -vocab % size)))
    blocks = blocks.reshape(rows, -1, size)
    block = pick(jnp.sum(blocks, axis=-1), u[:, 0])
    inside = jnp.take_along_axis(blocks, block[:, None, None], axis=1)[:, 0]
    return block * size + pick(inside, u[:, 1])


def sample_tokens(logits: jax.Array, keys: jax.Array, temperature: jax.Array, top_p: jax.Array,
                  top_k: jax.Array, use_filters: bool) -> tuple[jax.Array, jax.Array]:
    """Sample one token per row and return (tokens [rows] int32, log-probs [rows] fp32).

    Rows with temperature <= 0 take the argmax. The log-prob is that of the distribution the token was drawn
    from: log_softmax(logits / T) at the chosen token (T = 1 for greedy rows), and under top-k/top-p the
    renormalised truncated distribution's, log(exp(scaled) / sum over the kept tokens), so the behaviour
    log-prob in an importance weight is the true sampling probability (issue 47). Without a filter it is the
    quantity the trainer recomputes with `token_logprobs(..., temperature=T)`; with one the trainer's is lower
    by the log of the kept mass (the ratio then starts below 1, as it truly is). Sampled rows draw from softmax
    of the (filtered) scaled logits with `categorical`; exp(scaled - max) serves both the draw and the
    log-normaliser.

    Args:
      logits: [rows, vocab] fp32.
      keys: [rows] PRNG keys, one per row (so a row's draw does not depend on the rest of the batch).
      temperature, top_p, top_k: [rows] per-row parameters.
      use_filters: static; False skips the vocabulary sort when no row uses top-k/top-p.
    """
    greedy = temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, temperature)[:, None]
    shifted = scaled - jax.lax.stop_gradient(jnp.max(scaled, axis=-1, keepdims=True))
    unnormalised = jnp.exp(shifted)
    log_z = jnp.log(jnp.sum(unnormalised, axis=-1))
    if use_filters:
        unnormalised = jnp.where(filter_logits(scaled, top_k, top_p) > -jnp.inf, unnormalised, 0.0)
        filtered = (top_k > 0) | (top_p < 1.0)
        # the kept tokens' normaliser for filtered sampled rows; greedy and unfiltered rows keep the full one
        log_z = jnp.where(filtered & ~greedy, jnp.log(jnp.sum(unnormalised, axis=-1)), log_z)
    u = 1.0 - jax.vmap(lambda k: jax.random.uniform(k, (2,), jnp.float32))(keys)  # (0, 1]
    sampled = categorical(unnormalised, u)
    tokens = jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)
    return tokens, jnp.take_along_axis(shifted, tokens[:, None], axis=-1)[:, 0] - log_z
