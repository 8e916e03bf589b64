"""Partial rollouts in the sampler: a new policy version taken between decode segments without draining. Tokens
before the swap carry the old version, after it the new one, and each token's log-prob is the whole sequence's
under the weights that sampled it; with the swap off the completions are today's, bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.model.llama import token_logprobs
from swerl_jax.sampler.continuous import ContinuousEngine
from swerl_jax.sampler.engine import SamplingParams
from swerl_jax.sampler.swap import token_versions
from tests.sampler.test_engine import PROMPTS, tiny  # noqa: F401 (the module fixture)

SP = SamplingParams(temperature=1.0, max_new_tokens=16, stop_token_ids=())
SEGMENT = 4


def newer(params, scale=0.05):
    """Version 1: every weight moved, so that its log-probs differ clearly from version 0's."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    return jax.tree.unflatten(tree, [x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)])


def once(version, params):
    """A weight source that publishes (version, params) at its first poll, then nothing newer."""
    calls = []

    def poll():
        calls.append(1)
        return (version, params) if len(calls) == 1 else None
    return poll, calls


def engine(config, params, **kwargs):
    return ContinuousEngine(config, params, max_batch=6, max_prompt_len=32, max_new_tokens=16, segment=SEGMENT,
                            **kwargs)


def test_token_versions_from_spans():
    assert token_versions([(0, 3), (4, 5)], 6).tolist() == [3, 3, 3, 3, 5, 5]
    assert token_versions([(0, 3), (0, 4)], 2).tolist() == [4, 4]  # a swap before the row decoded anything
    assert token_versions([(0, 3), (9, 4)], 5).tolist() == [3] * 5  # the row ended before the swap


def test_off_is_bit_identical_and_never_asks_the_source(tiny):  # noqa: F811
    config, params, _ = tiny
    today = engine(config, params).generate(PROMPTS, SP, num_samples=3, seed=5)
    source, calls = once(1, newer(params))
    off = engine(config, params, weight_source=source).generate(PROMPTS, SP, num_samples=3, seed=5)
    idle, _ = once(0, params)  # on, but nothing newer is published: the same completions, bit for bit
    on = engine(config, params, partial_rollouts=True, weight_source=idle).generate(PROMPTS, SP, num_samples=3,
                                                                                    seed=5)
    assert not calls
    for got in (off, on):
        for gt, gg in zip(today, got):
            for a, b in zip(gt, gg):
                assert a.tokens.tobytes() == b.tokens.tobytes() and a.logprobs.tobytes() == b.logprobs.tobytes()
                assert a.policy_version == b.policy_version == 0
    assert all(c.token_versions is None for g in off for c in g)
    assert all(c.token_versions.tolist() == [0] * c.completion_length for g in on for c in g)


def test_version_taken_mid_generation_records_it_per_token(tiny):  # noqa: F811
    config, params0, _ = tiny
    params1 = newer(params0)
    source, calls = once(1, params1)
    pool = engine(config, params0, partial_rollouts=True, weight_source=source)
    groups = pool.generate(PROMPTS, SP, num_samples=3, seed=5)  # 12 rows through a pool of 6
    assert pool.swaps == 1 and pool.policy_version == 1 and calls
    flat = [c for g in groups for c in g]
    assert all(c.completion_length == 16 for c in flat)  # no stop tokens: every row runs its 16 tokens
    # the first six rows were admitted under version 0 and swapped after one segment; the rest start on 1
    spanning = [c.token_versions.tolist() for c in flat[:6]]
    assert spanning == [[0] * SEGMENT + [1] * (16 - SEGMENT)] * 6
    assert all(c.token_versions.tolist() == [1] * 16 and c.policy_version == 1 for c in flat[6:])
    assert all(c.policy_version == 0 for c in flat[:6])  # a completion's version is its oldest token's
    # each token's log-prob is the whole sequence's under the version that sampled it (fp32, as the engine's
    # parity with the trainer: <= 1e-4); under the other version it is clearly not
    for version, p, other in ((0, params0, params1), (1, params1, params0)):
        assert mismatch(config, p, flat, version) <= 1e-4
        assert mismatch(config, other, flat, version) > 1e-2


def mismatch(config, params, flat, version, width=64):
    """Largest |sampler log-prob - token_logprobs(params)| over the tokens that `version` sampled."""
    tokens = np.zeros((len(flat), width), np.int32)
    mask = np.zeros((len(flat), width), bool)
    for i, c in enumerate(flat):
        row = list(PROMPTS[c.prompt_index]) + c.tokens.tolist()
        tokens[i, :len(row)], mask[i, :len(row)] = row, True
    lp = np.asarray(token_logprobs(config, params, jnp.asarray(tokens), jnp.asarray(mask), temperature=1.0))
    worst = 0.0
    for i, c in enumerate(flat):
        start = len(PROMPTS[c.prompt_index]) - 1
        keep = c.token_versions == version
        if keep.any():
            worst = max(worst, float(np.abs(lp[i, start:start + c.completion_length][keep] - c.logprobs[keep]).max()))
    return worst
