"""Rollout collection: groups in order, rewards from the real reward service, per-request seeds, overlap,
the bounded wait. Overlap is checked as an order of events (never as durations)."""

import concurrent.futures
from concurrent.futures import Future

import numpy as np
import pytest

from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.reward import calculate_search_replace_reward
from swerl_jax.reward.service import RewardService
from swerl_jax.rl.collect import CollectTimes, RewardHangError, collect_rollouts, rollout_seed, wait_rewards
from swerl_jax.rl.rollouts import flatten_groups
from swerl_jax.sampler.engine import Completion, SamplingParams


class ScriptedSampler:
    """Answers each prompt with its record's oracle answer for even samples and a malformed one for odd ones.

    ``before_return(request)`` runs before each request returns (a sampler busy generating)."""

    def __init__(self, answers, before_return=None):
        self.answers, self.before_return, self.calls = answers, before_return, []

    def generate(self, prompts, sampling=SamplingParams(), num_samples=1, seed=0, min_policy_version=0):
        self.calls.append((len(prompts), seed, min_policy_version))
        if self.before_return is not None:
            self.before_return(len(self.calls) - 1)
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
    # what the RL loader yields: unpadded prompt ids (the first token names the record; lengths differ)
    ids = [np.full((i + 2,), i, np.int32) for i in range(len(records))]
    return {"prompt_ids": ids, "instance_id": [r["instance_id"] for r in records],
            "code_context": [r["code_context"] for r in records],
            "oracle_new_content": [r["oracle_new_content"] for r in records]}


def test_collect_scores_every_rollout_in_order():
    records = synthetic_records(4, seed=3)
    sampler = ScriptedSampler({i: oracle_solution(r) for i, r in enumerate(records)})
    with RewardService(num_workers=2) as service:
        groups, times = collect_rollouts(sampler, service, _batch(records), SamplingParams(), num_samples=4,
                                         step=7, seed=11, policy_version=6, prompts_per_request=3)
    assert [[r.group for r in g] for g in groups] == [[p] * 4 for p in range(4)]  # [P][G]
    rollouts = flatten_groups(groups)
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


class RecordingService:
    """A reward service that logs each submit in a shared event log and keeps each call's futures."""

    def __init__(self, service, events):
        self.service, self.events, self.submitted = service, events, []
        self.hang_guard_s = service.hang_guard_s

    def submit(self, items):
        self.events.append(("submit", len(self.submitted)))
        futures = self.service.submit(items)
        self.submitted.append(futures)
        return futures


def test_reward_time_hides_behind_generation():
    records = synthetic_records(4, seed=5)
    events = []

    def generating(request):
        events.append(("generate", request))
        if request > 0:  # the previous request's rewards are scored while this one is being generated
            done, pending = concurrent.futures.wait(service.submitted[request - 1], timeout=120)
            assert not pending, "the rewards of the previous request were not scored during generation"
            events.append(("scored", request - 1))

    sampler = ScriptedSampler({i: oracle_solution(r) for i, r in enumerate(records)}, before_return=generating)
    with RewardService(num_workers=2) as real:
        service = RecordingService(real, events)
        groups, times = collect_rollouts(sampler, service, _batch(records), SamplingParams(), num_samples=4,
                                         step=1, seed=0, policy_version=0, prompts_per_request=1)
    rollouts = flatten_groups(groups)
    # each request's rewards are submitted as soon as it returns, before the next request is sent, and are
    # scored before that next request returns: only the last request's rewards are waited for
    assert events == [("generate", 0), ("submit", 0), ("generate", 1), ("scored", 0), ("submit", 1),
                      ("generate", 2), ("scored", 1), ("submit", 2), ("generate", 3), ("scored", 2), ("submit", 3)]
    assert [r.reward for r in rollouts] == [1.0, -1.0] * 8
    assert times.reward_wall_s > 0.0 and times.reward_wait_s >= 0.0 and 0.0 <= times.reward_hidden_frac <= 1.0


class StuckService:
    """A reward service whose futures never resolve (a dead dispatcher), or resolve with ``error``."""

    hang_guard_s = 0.5

    def __init__(self, error=None):
        self.error = error

    def submit(self, items):
        futures = [Future() for _ in items]
        if self.error is not None:
            futures[-1].set_exception(self.error)
        return futures


def test_a_stuck_reward_service_raises_instead_of_hanging():
    records = synthetic_records(2, seed=3)
    sampler = ScriptedSampler({i: oracle_solution(r) for i, r in enumerate(records)})
    args = (sampler, StuckService(), _batch(records), SamplingParams())
    with pytest.raises(RewardHangError, match=r"8 of 8 rewards of step 3 were still pending after 0.1 s"):
        collect_rollouts(*args, num_samples=4, step=3, seed=0, policy_version=0, hang_guard_s=0.1)
    with pytest.raises(RewardHangError, match=r"after 0.5 s"):  # the service's own guard, 0.5 s
        collect_rollouts(*args, num_samples=4, step=3, seed=0, policy_version=0)
    failed = (sampler, StuckService(RuntimeError("reward service dispatcher failed: boom")), _batch(records))
    with pytest.raises(RuntimeError, match="boom"):
        collect_rollouts(*failed, SamplingParams(), num_samples=4, step=3, seed=0, policy_version=0)


def test_wait_rewards_keeps_waiting_while_rewards_resolve():
    futures = [Future() for _ in range(3)]
    futures[0].set_result((1.0, {}))
    # one resolved per window: no hang; the guard only fires on a window where nothing resolves
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(wait_rewards, futures, 60.0)
        futures[1].set_result((0.5, {}))
        futures[2].set_result((-1.0, {"reason": "tag_count"}))
        assert waiter.result(timeout=120) == [(1.0, {}), (0.5, {}), (-1.0, {"reason": "tag_count"})]


def test_seeds_are_distinct_and_non_negative():
    seeds = {rollout_seed(s, t, r) for s in range(3) for t in range(50) for r in range(4)}
    assert len(seeds) == 600 and min(seeds) >= 0 and max(seeds) < 2**31
    assert CollectTimes().reward_hidden_frac == 1.0


class PartialSampler(ScriptedSampler):
    """A sampler with partial rollouts: each completion's first token is of `min_policy_version`, the rest of
    the version taken mid-generation (one newer)."""

    def generate(self, prompts, sampling=SamplingParams(), num_samples=1, seed=0, min_policy_version=0):
        groups = super().generate(prompts, sampling, num_samples, seed, min_policy_version)
        for c in (c for g in groups for c in g):
            c.token_versions = np.asarray([min_policy_version] + [min_policy_version + 1] * (c.tokens.size - 1),
                                          np.int32)
        return groups


def test_partial_rollouts_token_versions_reach_the_rollouts_and_the_per_token_staleness():
    from swerl_jax.rl.collector import Groups
    from swerl_jax.rl.producer import staleness, token_staleness

    records = synthetic_records(2, seed=3)
    sampler = PartialSampler({i: oracle_solution(r) for i, r in enumerate(records)})
    with RewardService(num_workers=1) as service:
        groups, _ = collect_rollouts(sampler, service, _batch(records), SamplingParams(), num_samples=2, step=7,
                                     seed=11, policy_version=5)
    rollouts = flatten_groups(groups)
    assert [r.token_versions.tolist() for r in rollouts] == [[5, 6, 6], [5, 6, 6, 6]] * 2
    scored = Groups.scored(groups, 2)
    assert staleness(scored, 7) == (1.0, 1)  # a sample counts by its oldest token: version 5 at step 7
    # per token: 2 of the 7 tokens of each group are 1 version behind (5), the rest 0 (version 6)
    assert token_staleness(scored, 7) == (pytest.approx(2 / 7), 1)


def test_inline_sampler_refuses_partial_rollouts():
    """Inline, the trainer hands over params between requests only: sampler.partial_rollouts is one clear line."""
    import types

    from swerl_jax.rl.collect import InlineSampler

    with pytest.raises(ValueError, match=r"sampler.partial_rollouts=True .* set sampler.mode=process"):
        InlineSampler(types.SimpleNamespace(partial_rollouts=True))
