"""Kept K/V between turns: the same completions as re-prefilling every turn's whole conversation (same seeds), with
rows that stop early, per-row caps, conversations that end, and a session compacted when its slots run out."""

from __future__ import annotations

import numpy as np
import pytest

from swerl_jax.agent.rollout import Reprefill
from swerl_jax.rl.collect import InlineSampler
from swerl_jax.sampler.engine import SamplingEngine, SamplingParams
from swerl_jax.sampler.sessions import KeptKV
from tests.sampler.test_engine import PROMPTS, tiny  # noqa: F401 (the module fixture)


def _converse(gen, prompts, samples, sampling, turns, seed=5):
    """Every conversation: first turn, then per turn an 'observation' (tokens derived from the turn, so both
    generators see the same ones) and the model's next turn; conversation k drops out after turn k + 1."""
    firsts = gen.first_turn([np.asarray(p, np.int32) for p in prompts], samples, sampling, seed, 0)
    convs = [[np.asarray(p, np.int32), c] for p, group in zip(prompts, firsts) for c in group]
    transcript = [np.concatenate([p, c.tokens]) for p, c in convs]
    out = [[c.tokens.tolist()] for _, c in convs]
    logprobs = [[c.logprobs] for _, c in convs]
    for turn in range(1, turns):
        active = [k for k in range(len(convs)) if k + 1 >= turn]
        contexts, caps = [], []
        for k in active:
            observation = np.asarray([7 + (turn * 13 + k * 5 + j) % 300 for j in range(3 + (k + turn) % 6)],
                                     np.int32)
            transcript[k] = np.concatenate([transcript[k], observation])
            contexts.append(transcript[k])
            caps.append(4 + (k * 7 + turn) % 12)
        got = gen.next_turn(contexts, caps, sampling, seed * 100 + turn, 0)
        for k, c in zip(active, got):
            transcript[k] = np.concatenate([transcript[k], c.tokens])
            out[k].append(c.tokens.tolist())
            logprobs[k].append(c.logprobs)
    return out, logprobs


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_kept_kv_gives_the_completions_of_reprefill(tiny, temperature):  # noqa: F811
    config, params, _ = tiny
    engine = SamplingEngine(config, params, max_batch=16, max_prompt_len=128, max_new_tokens=16)
    probe = engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=16), num_samples=2, seed=1)
    counts = np.bincount(np.concatenate([c.tokens for g in probe for c in g]))
    stop = tuple(int(t) for t in np.argsort(counts)[-1:])  # a frequent token: rows end at different lengths
    sampling = SamplingParams(temperature=temperature, max_new_tokens=16, stop_token_ids=stop)
    want, want_lp = _converse(Reprefill(InlineSampler(engine)), PROMPTS[:3], 2, sampling, turns=4)
    kept = KeptKV(engine, max_context=128)
    got, got_lp = _converse(kept, PROMPTS[:3], 2, sampling, turns=4)
    assert got == want
    worst = max(float(np.abs(a - b).max()) for ga, gb in zip(want_lp, got_lp) for a, b in zip(ga, gb) if a.size)
    assert worst <= 1e-5, worst
    assert kept.compactions == 0
    # the kept generator prefilled only the new tokens: prompts once per row, then each turn's observations
    assert kept.prefilled_tokens < sum(len(c) for group in want for c in group) + 6 * 128

    want, want_lp = _converse(Reprefill(InlineSampler(engine)), PROMPTS[:3], 2, sampling, turns=5)
    # a session with too few slots is compacted (the conversations prefilled again) and still agrees
    small = KeptKV(engine, max_context=128, slots=144)  # the least: 4 turns of 32 slots, then compacted
    again, again_lp = _converse(small, PROMPTS[:3], 2, sampling, turns=5)
    assert small.compactions >= 1
    assert again == want
    worst = max(float(np.abs(a - b).max()) for ga, gb in zip(want_lp, again_lp) for a, b in zip(ga, gb) if a.size)
    assert worst <= 1e-5, worst


def test_a_context_that_extends_no_conversation_is_refused(tiny):  # noqa: F811
    config, params, _ = tiny
    engine = SamplingEngine(config, params, max_batch=8, max_prompt_len=64, max_new_tokens=8)
    kept = KeptKV(engine, max_context=64)
    kept.first_turn([np.asarray(PROMPTS[0], np.int32)], 1, SamplingParams(max_new_tokens=8), 0, 0)
    with pytest.raises(ValueError, match="does not extend any kept conversation"):
        kept.next_turn([np.asarray(PROMPTS[1] + [3, 4], np.int32)], [4], SamplingParams(max_new_tokens=8), 0, 0)
    with pytest.raises(ValueError, match="slots=40"):
        KeptKV(engine, max_context=64, slots=40)
