"""sample_tokens: drawn frequencies vs softmax of the (filtered) scaled logits, support, greedy rows, log-probs."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swerl_jax.sampler.sampling import pick, sample_tokens

VOCAB = 1000  # not a multiple of the draw's block size: the padded last block is exercised
ROWS = 10_000  # draws per call; 20 calls (200,000 draws) for the full vocabulary, 5 for a truncated one


def _logits(seed: int = 0, vocab: int = VOCAB) -> np.ndarray:
    """One row of logits spanning ~12 nats, a few tokens dominating and a long tail (like an LM's)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(vocab) * 2.0).astype(np.float32)


def _counts(logits: np.ndarray, temperature: float, top_p: float = 1.0, top_k: int = 0, calls: int = 20
            ) -> np.ndarray:
    """Token counts of ROWS x calls independent draws (one key per row) from the same logits."""
    use_filters = top_k > 0 or top_p < 1.0
    fn = jax.jit(functools.partial(sample_tokens, use_filters=use_filters))
    batch = jnp.broadcast_to(jnp.asarray(logits), (ROWS, logits.size))
    full = lambda v, dt: jnp.full((ROWS,), v, dt)  # noqa: E731
    counts = np.zeros(logits.size, np.int64)
    for call in range(calls):
        keys = jax.random.split(jax.random.PRNGKey(1000 + call), ROWS)
        tokens, _ = fn(batch, keys, full(temperature, jnp.float32), full(top_p, jnp.float32),
                       full(top_k, jnp.int32))
        counts += np.bincount(np.asarray(tokens), minlength=logits.size)
    return counts


def _reference(logits: np.ndarray, temperature: float, top_p: float = 1.0, top_k: int = 0) -> np.ndarray:
    """Target probabilities in float64: softmax(logits / T), then HF's top-k, then top-p (renormalised)."""
    z = logits.astype(np.float64) / temperature
    order = np.argsort(-z, kind="stable")
    keep = np.zeros(z.size, bool)
    k = top_k if top_k > 0 else z.size
    p = np.exp(z[order[:k]] - z[order[0]])
    p /= p.sum()
    mass_before = np.cumsum(p) - p
    keep[order[:k][mass_before < top_p]] = True
    probs = np.where(keep, np.exp(z - z.max()), 0.0)
    return probs / probs.sum()


def _assert_matches(counts: np.ndarray, probs: np.ndarray) -> None:
    """Nothing outside the support; chi-square within ~5 standard deviations of its mean; total variation below
    1.5x its expected value under exact sampling.

    Bins with an expected count below 5 are pooled. For df degrees of freedom chi-square has mean df and standard
    deviation sqrt(2 df); a sampler off by one index, one block or a temperature fails by orders of magnitude.
    The expected TV of n exact draws is about 0.5 sum_i sqrt(2 p_i (1 - p_i) / (pi n)) (~0.02 here).
    """
    n = counts.sum()
    assert counts[probs == 0].sum() == 0, "a token outside top-k/top-p was drawn"
    expected = n * probs
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    obs, exp = obs[exp > 0], exp[exp > 0]
    stat = float(np.sum((obs - exp) ** 2 / exp))
    df = obs.size - 1
    tv = 0.5 * float(np.abs(counts / n - probs).sum())
    tv_null = 0.5 * float(np.sum(np.sqrt(2 * probs * (1 - probs) / (np.pi * n))))
    print(f"chi2 {stat:.1f} (df {df}), TV {tv:.4f} (expected {tv_null:.4f})")
    assert stat < df + 5 * np.sqrt(2 * df), (stat, df)
    assert tv < 1.5 * tv_null, (tv, tv_null)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_frequencies_match_softmax(temperature):
    logits = _logits()
    _assert_matches(_counts(logits, temperature), _reference(logits, temperature))


@pytest.mark.parametrize("top_k,top_p", [(20, 1.0), (0, 0.6), (50, 0.9)])
def test_top_k_top_p_frequencies_and_support(top_k, top_p):
    logits = _logits(1)
    probs = _reference(logits, 1.0, top_p, top_k)
    assert 1 < np.count_nonzero(probs) < VOCAB
    _assert_matches(_counts(logits, 1.0, top_p, top_k, calls=5), probs)


def test_pick_never_returns_a_zero_mass_entry():
    """XLA:CPU's blocked cumsum can put a zero entry one rounding step above its predecessor; u placed exactly on
    every cumulative value (and one ulp either side) must still land on an entry with mass."""
    rng = np.random.default_rng(2)
    vocab = 49_152
    mass = np.where(rng.random(vocab) < 0.5, 0.0, rng.random(vocab)).astype(np.float32)
    mass /= mass.sum()
    cdf = np.asarray(jnp.cumsum(jnp.asarray(mass)))
    total = cdf[mass > 0].max()
    step = np.diff(cdf, prepend=0.0)
    risky = cdf[(mass == 0) & (step > 0)]  # zero entries the rounding put above their predecessor
    assert risky.size > 0  # the hazard exists on this backend (XLA:CPU); drop this line if a backend fixes it
    anchors = np.concatenate([risky, rng.choice(cdf, 300, replace=False)])
    us = np.concatenate([anchors, np.nextafter(anchors, 0), np.nextafter(anchors, 2)]) / total
    us = us[(us > 0) & (us <= 1)].astype(np.float32)
    got = np.asarray(pick(jnp.broadcast_to(jnp.asarray(mass), (us.size, vocab)), jnp.asarray(us)))
    assert np.all(mass[got] > 0)
    # Otherwise it is the inverse CDF: the float64 cumulative mass before the pick is below u x total and the mass
    # through it reaches it, up to the float32 cumsum's rounding (1e-4 over 49,152 entries).
    grid = np.linspace(1e-3, 1.0, 997, dtype=np.float32)
    got = np.asarray(pick(jnp.broadcast_to(jnp.asarray(mass), (grid.size, vocab)), jnp.asarray(grid)))
    cdf64 = np.cumsum(mass.astype(np.float64))
    target = grid * cdf64[-1]
    assert np.all(cdf64[got] - mass[got] <= target + 1e-4) and np.all(cdf64[got] >= target - 1e-4)
    exact = np.searchsorted(cdf64, target)
    assert np.mean(got == exact) > 0.95


@pytest.mark.parametrize("use_filters", [False, True])
def test_greedy_rows_and_logprobs(use_filters):
    """Greedy rows take the argmax; a row without top-k/top-p reports log_softmax(logits / T)[token] (T = 1 when
    greedy; a greedy row's filters change nothing it reports)."""
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((6, 49_152)) * 3).astype(np.float32)
    temperature = np.array([0.0, 1.0, 0.7, 0.0, 1.3, 1.0], np.float32)
    top_p = np.array([0.9, 0.9, 1.0, 1.0, 0.5, 1.0], np.float32)
    top_k = np.array([0, 5, 0, 3, 0, 0], np.int32)
    keys = jax.random.split(jax.random.PRNGKey(4), 6)
    tokens, lp = jax.jit(functools.partial(sample_tokens, use_filters=use_filters))(
        jnp.asarray(logits), keys, jnp.asarray(temperature), jnp.asarray(top_p), jnp.asarray(top_k))
    tokens, lp = np.asarray(tokens), np.asarray(lp)
    greedy = temperature == 0
    np.testing.assert_array_equal(tokens[greedy], logits[greedy].argmax(-1))
    scaled = logits.astype(np.float64) / np.where(greedy, 1.0, temperature)[:, None]
    ref = scaled - scaled.max(-1, keepdims=True)
    ref = ref - np.log(np.exp(ref).sum(-1, keepdims=True))
    plain = greedy | ((top_k == 0) & (top_p == 1.0)) | (not use_filters)
    np.testing.assert_allclose(lp[plain], ref[np.arange(6), tokens][plain], atol=2e-6)
    if use_filters:  # rows 1 and 3 drew inside their top-k
        for row, k in ((1, 5), (3, 3)):
            assert tokens[row] in np.argsort(-logits[row])[:k]


def test_logprobs_of_the_truncated_distribution_that_was_sampled():
    """Under top-k/top-p a sampled row reports log p(token) of the renormalised truncated distribution it drew
    from (issue 47 item 3), so pi_behav in an importance weight is the true sampling probability; rows of the same
    batch without filters keep log_softmax(logits / T)."""
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((5, 3000)) * 3).astype(np.float32)
    temperature = np.array([1.0, 0.7, 1.3, 1.0, 0.9], np.float32)
    top_p = np.array([0.9, 1.0, 0.5, 0.8, 1.0], np.float32)
    top_k = np.array([0, 5, 0, 40, 0], np.int32)
    keys = jax.random.split(jax.random.PRNGKey(6), 5)
    tokens, lp = jax.jit(functools.partial(sample_tokens, use_filters=True))(
        jnp.asarray(logits), keys, jnp.asarray(temperature), jnp.asarray(top_p), jnp.asarray(top_k))
    tokens, lp = np.asarray(tokens), np.asarray(lp)
    for row in range(5):
        probs = _reference(logits[row], float(temperature[row]), float(top_p[row]), int(top_k[row]))
        assert probs[tokens[row]] > 0
        assert lp[row] == pytest.approx(np.log(probs[tokens[row]]), abs=2e-5), row
    assert lp[0] > np.log(_reference(logits[0], 1.0)[tokens[0]]) + 1e-3  # truncation raised it
