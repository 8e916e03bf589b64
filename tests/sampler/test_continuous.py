"""Continuous batching: the same completions as the static engine for a given seed, whichever requests share the
pool, with rows stopping early (stop tokens, per-request caps) and refilled."""

from __future__ import annotations

import numpy as np

from swerl_jax.sampler.continuous import ContinuousEngine
from swerl_jax.sampler.engine import SamplingEngine, SamplingParams
from tests.sampler.test_engine import PROMPTS, tiny  # noqa: F401 (the module fixture)


def tokens(groups):
    return [[c.tokens.tolist() for c in g] for g in groups]


def test_refilled_pool_gives_the_static_engines_completions(tiny):  # noqa: F811
    temperature = 1.0
    config, params, _ = tiny
    static = SamplingEngine(config, params, max_batch=16, max_prompt_len=32, max_new_tokens=24, shared_prefix=False)
    caps = [24, 10, 24, 5]
    probe = static.generate(PROMPTS, SamplingParams(temperature=temperature, max_new_tokens=24), num_samples=3,
                            seed=3, max_new_tokens=caps)
    # two frequent tokens of the probe as stop tokens, so that rows end at different lengths
    counts = np.bincount(np.concatenate([c.tokens for g in probe for c in g]))
    sp = SamplingParams(temperature=temperature, max_new_tokens=24,
                        stop_token_ids=tuple(int(t) for t in np.argsort(counts)[-2:]))
    want = static.generate(PROMPTS, sp, num_samples=3, seed=3, max_new_tokens=caps)
    lengths = {len(c.tokens) for g in want for c in g}
    assert len(lengths) > 2 and any(c.finish_reason == "stop" for g in want for c in g)
    # 12 requests through a pool of 3 rows, refilled every 4 tokens
    pool = ContinuousEngine(config, params, max_batch=3, max_prompt_len=32, max_new_tokens=24, segment=4)
    got = pool.generate(PROMPTS, sp, num_samples=3, seed=3, max_new_tokens=caps)
    assert tokens(got) == tokens(want)
    assert [[c.finish_reason for c in g] for g in got] == [[c.finish_reason for c in g] for g in want]
    worst = max(float(np.abs(x.logprobs - y.logprobs).max()) for gw, gg in zip(want, got) for x, y in zip(gw, gg)
                if x.logprobs.size)
    assert worst <= 1e-5, worst
    # other requests beside them (the first three prompts only): the same completions
    fewer = pool.generate(PROMPTS[:3], sp, num_samples=3, seed=3, max_new_tokens=caps[:3])
    assert tokens(fewer) == tokens(want)[:3]
