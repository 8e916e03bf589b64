"""Rollout collection: groups in order, rewards from the real reward service, per-request seeds, overlap."""

import time

import numpy as np

from swerl_jax.data.synthetic import oracle_solution, synthetic_records
from swerl_jax.reward import calculate_search_replace_reward
from swerl_jax.reward.service import RewardService
from swerl_jax.rl.collect import CollectTimes, collect_rollouts, rollout_seed
from swerl_jax.sampler.engine import Completion, SamplingParams


class ScriptedSampler:
    """Answers each prompt with its record's oracle answer for even samples and a malformed one for odd ones;
    sleeps per request like a sampler that is busy generating."""

    def __init__(self, answers, delay_s=0.0):
        self.answers, self.delay_s, self.calls = answers, delay_s, []

    def generate(self, prompts, sampling=SamplingParams(), num_samples=1, seed=0, min_policy_version=0):
        self.calls.append((len(prompts), seed, min_policy_version))
        time.sleep(self.delay_s)
        out = []
        for i, p in enumerate(prompts):
            key = int(p[0])
            group = []
            for j in range(num_samples):
                text = self.answers[key] if j % 2 == 0 else "no tags at all"
                toks = np.arange(3 + j, dtype=np.int32)
                group.append(Completion(i, j, toks, np.full(toks.shape, -0.5, np.float32), text,
                                        "stop" if j < num_samples - 1 else "length", len(p), toks.size,
                                        min_policy_version))
            out.append(group)
        return out


def _batch(records):
    n = len(records)
    ids = np.zeros((n, 6), np.int32)
    mask = np.zeros((n, 6), bool)
    for i in range(n):
        ids[i, 6 - (i + 2):] = i  # the first real token names the record; lengths differ
        mask[i, 6 - (i + 2):] = True
    return {"prompt_ids": ids, "prompt_mask": mask, "instance_id": [r["instance_id"] for r in records],
            "code_context": [r["code_context"] for r in records],
            "oracle_new_content": [r["oracle_new_content"] for r in records]}


def test_collect_scores_every_rollout_in_order():
    records = synthetic_records(4, seed=3)
    sampler = ScriptedSampler({i: oracle_solution(r) for i, r in enumerate(records)})
    with RewardService(num_workers=2) as service:
        rollouts, times = collect_rollouts(sampler, service, _batch(records), SamplingParams(), num_samples=4,
                                           step=7, seed=11, policy_version=6, prompts_per_request=3)
    assert [(r.group, r.sample) for r in rollouts] == [(g, s) for g in range(4) for s in range(4)]
    assert sampler.calls == [(3, rollout_seed(11, 7, 0), 6), (1, rollout_seed(11, 7, 1), 6)]
    for r in rollouts:
        rec = records[r.group]
        expected, _ = calculate_search_replace_reward(rec["code_context"], rec["oracle_new_content"], r.completion)
        assert r.reward == expected == (1.0 if r.sample % 2 == 0 else -1.0)
        assert r.prompt_id == rec["instance_id"] and len(r.prompt_tokens) == r.group + 2
        assert r.truncated == (r.sample == 3) and r.policy_version == 6
    assert rollouts[1].format_error is not None and rollouts[0].format_error is None
    assert times.generate_s > 0


def test_reward_time_hides_behind_generation():
    records = synthetic_records(4, seed=5)
    # a slow sampler (0.3 s per request, one prompt per request) and 16 rollouts of real reward work
    sampler = ScriptedSampler({i: oracle_solution(r) for i, r in enumerate(records)}, delay_s=0.3)
    with RewardService(num_workers=2) as service:
        service.submit([{"code_context": {}, "oracle_new_content": {}, "output": ""}])[0].result()  # warm
        _, times = collect_rollouts(sampler, service, _batch(records), SamplingParams(), num_samples=4, step=1,
                                    seed=0, policy_version=0, prompts_per_request=1)
    # rewards of requests 1-3 were scored while later requests were generated: only the last one's are waited on
    assert times.reward_wall_s > 0.6 and times.reward_wait_s < times.reward_wall_s / 2
    assert times.reward_hidden_frac > 0.5


def test_seeds_are_distinct_and_non_negative():
    seeds = {rollout_seed(s, t, r) for s in range(3) for t in range(50) for r in range(4)}
    assert len(seeds) == 600 and min(seeds) >= 0 and max(seeds) < 2**31
    assert CollectTimes().reward_hidden_frac == 1.0
