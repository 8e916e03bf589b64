"""Agent episodes streamed across steps: a step takes the first groups to finish, the others carry on under newer
policies (each token keeping its behaviour log-prob), and a group that would break the staleness bound is dropped."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

from swerl_jax.agent.env import EpisodeStats
from swerl_jax.agent.rollout import SYSTEM, ChatFormat
from swerl_jax.agent.stream import EpisodeStream
from swerl_jax.rl.collector import Groups
from swerl_jax.rl.producer import staleness
from swerl_jax.sampler.types import Completion, SamplingParams
from swerl_jax.tokenizer import load_tokenizer


class CountingEnv:
    """An episode that finishes after its task's `turns` model turns; reward 1 (no sandbox: the stream's logic)."""

    def __init__(self, instance: dict, closed: list) -> None:
        self.instance, self.closed, self.stats = instance, closed, EpisodeStats()

    def reset(self) -> str:
        return f"fix task {self.instance['instance_id']}"

    def step(self, text: str):
        self.stats.turns += 1
        done = self.stats.turns >= self.instance["turns"]
        if done:
            self.stats.termination = "finish"
        return f"ran {text}", done, {"error": None, "termination": self.stats.termination}

    def end(self, termination: str) -> None:
        self.stats.termination = self.stats.termination or termination

    def reward(self):
        return 1.0 + 0.1 * self.instance["turns"], {}

    def close(self) -> None:
        self.closed.append(self.instance["instance_id"])


class VersionedGenerator:
    """A `TurnGenerator` serving policy `version`: two tokens and the end of turn, log-probs naming the version."""

    def __init__(self, eos: int) -> None:
        self.version, self.eos, self.calls = 0, eos, []

    def _one(self, seed: int, min_policy_version: int) -> Completion:
        assert self.version >= min_policy_version
        tokens = np.asarray([7 + seed % 5, 9, self.eos], np.int32)
        return Completion(0, 0, tokens, np.full(3, -0.5 - self.version, np.float32), "act", "stop", 0, 3,
                          self.version)

    def first_turn(self, prompts, num_samples, sampling, seed, min_policy_version):
        self.calls.append(("first", len(prompts), seed))
        return [[self._one(seed, min_policy_version) for _ in range(num_samples)] for _ in prompts]

    def next_turn(self, contexts, caps, sampling, seed, min_policy_version):
        self.calls.append(("next", len(contexts), seed))
        return [self._one(seed, min_policy_version) for _ in contexts]


TURNS = [5, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1]  # task i's episode length; task 0 is the slow one


def _run(steps: int, max_staleness: int = 1):
    """Collect `steps` steps of P = 2 groups x G = 2 episodes, one batch ahead; the trainer publishes version s
    after step s (the generator serves it). Returns per step (groups, metrics), the calls, the closed envs."""
    tokenizer = load_tokenizer("testbed")
    chat, closed = ChatFormat(tokenizer), []
    tasks = iter([[{"instance_id": f"t{i}", "turns": TURNS[i]}, {"instance_id": f"t{i + 1}", "turns": TURNS[i + 1]}]
                  for i in range(0, len(TURNS), 2)])
    gen = VersionedGenerator(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    out = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        stream = EpisodeStream(chat, SYSTEM, SamplingParams(max_new_tokens=8), num_samples=2, ahead_batches=1,
                               max_context=512, seed=3, pool=pool)
        for step in range(1, steps + 1):
            gen.version = step - 1
            groups, times, metrics = stream.collect(gen, lambda: next(tasks),
                                                    lambda inst: [CountingEnv(inst, closed) for _ in range(2)],
                                                    step, step - 1, min_version=step - 1 - max_staleness)
            out.append((groups, metrics))
        stream.close()
    return out, gen.calls, closed


def test_a_step_takes_the_first_groups_to_finish_and_the_slow_one_carries_on():
    out, calls, closed = _run(3)
    ids = [[g[0].prompt_id for g in groups] for groups, _ in out]
    # step 1: tasks 0-3 in flight (one batch ahead); 1 and 2 finish after one turn: the 5-turn task 0 holds nothing
    assert ids[0] == ["t1", "t2"]
    # the requests: step 1 one turn of 4 new groups; step 2 the 2 new groups' first turns and the 4 carried
    # episodes' next turns; step 3 (task 0 dropped, task 5 done) 4 new groups, one turn
    assert [(kind, n) for kind, n, _ in calls] == [("first", 4), ("first", 2), ("next", 4), ("first", 4)]
    # step 2: task 3 (2 turns) finished under version 1 after its first turn under version 0; 4 and 5 ran one turn,
    # 4 goes now, 5 (finished too) waits for step 3
    assert ids[1] == ["t3", "t4"]
    t3 = out[1][0][0]
    assert [r.sample for r in t3] == [0, 1] and all(r.group == 0 for r in t3)
    for r in t3:  # a partial rollout: each model token keeps its own version's behaviour log-prob
        model = r.sampler_logprobs[r.token_mask.astype(bool)]
        assert model.tolist() == [-0.5] * 3 + [-1.5] * 3 and r.policy_version == 0
    assert out[1][1]["agent/stream_carried_groups"] == 1 and out[1][1]["agent/stream_multi_version_frac"] == 0.5
    # step 3 (min version 1): task 0, started under version 0 and still running, is dropped unscored; 5 goes first
    assert out[2][1]["agent/stream_dropped_groups"] == 1 and "t0" in closed
    assert ids[2][0] == "t5" and "t0" not in {i for step in ids for i in step}
    for step, (groups, _) in enumerate(out, start=1):  # the bound: every trained token at most k = 1 versions old
        g = Groups.scored(groups, 2)
        assert staleness(g, step)[1] <= 1 and g.rewards.shape == (2, 2)
        assert [[r.group for r in grp] for grp in groups] == [[0, 0], [1, 1]]


def test_the_stream_is_deterministic_and_its_seeds_follow_step_and_turn():
    a, calls_a, _ = _run(3)
    b, calls_b, _ = _run(3)
    assert calls_a == calls_b
    for (ga, ma), (gb, mb) in zip(a, b):
        assert ma == mb
        for x, y in zip(ga, gb):
            for r, s in zip(x, y):
                assert (r.prompt_id, r.reward, r.completion_tokens.tolist()) == (s.prompt_id, s.reward,
                                                                                 s.completion_tokens.tolist())
    assert len({seed for _, _, seed in calls_a}) == len(calls_a)  # no two requests share a seed


def test_at_staleness_0_a_carried_group_is_always_dropped():
    """k = 0 (refused by resolve for a stream, shown here): anything carried is a version old, so dropped."""
    out, _, closed = _run(3, max_staleness=0)
    assert [m["agent/stream_dropped_groups"] for _, m in out][1:] == [2, 2]
    with pytest.raises(ValueError, match="stream_ahead_batches=0"):
        EpisodeStream(None, SYSTEM, SamplingParams(), num_samples=2, ahead_batches=0, max_context=8, seed=0,
                      pool=None)


def test_a_resumed_stream_starts_the_tasks_in_flight_again_and_loses_no_task():
    """Issue 59 item 6 at the stream: steps 1-2, then a fresh stream (a resumed run) told the tasks in flight after
    step 2 and drawing from the position after step 2's draws, steps 3-4. Every task drawn is trained exactly once
    or is still in flight at the end; the restarted ones are regenerated from their first turn and counted."""
    tokenizer = load_tokenizer("testbed")
    chat, closed = ChatFormat(tokenizer), []
    batches = [[{"instance_id": f"t{i}", "turns": TURNS[i]}, {"instance_id": f"t{i + 1}", "turns": TURNS[i + 1]}]
               for i in range(0, len(TURNS), 2)]
    drawn = []  # the data position: how many batches were drawn

    def draw():
        drawn.append(batches[len(drawn)])
        return drawn[-1]

    gen = VersionedGenerator(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    trained, metrics = [], []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        def stream():
            return EpisodeStream(chat, SYSTEM, SamplingParams(max_new_tokens=8), num_samples=2, ahead_batches=1,
                                 max_context=512, seed=3, pool=pool)

        first = stream()
        for step in (1, 2, 3):  # step 3 is collected, then the run is killed before it is checkpointed
            gen.version = step - 1
            groups, _, m = first.collect(gen, draw, lambda inst: [CountingEnv(inst, closed) for _ in range(2)],
                                         step, step - 1, min_version=0)
            if step == 2:
                checkpoint = ([i["instance_id"] for i in first.in_flight()], len(drawn))
            if step < 3:
                trained += [g[0].prompt_id for g in groups]
        first.close()
        in_flight, position = checkpoint
        assert in_flight == ["t0", "t5"]  # the slow task 0 runs; 5 finished and waits for a step
        del drawn[position:]  # the resumed run's iterator: the checkpoint's position
        resumed = stream()
        resumed.restart([i for b in batches for i in b if i["instance_id"] in in_flight])
        assert [i["instance_id"] for i in resumed.in_flight()] == in_flight  # a checkpoint now would keep them
        for step in (3, 4):
            gen.version = step - 1
            groups, _, m = resumed.collect(gen, draw, lambda inst: [CountingEnv(inst, closed) for _ in range(2)],
                                           step, step - 1, min_version=0)
            trained += [g[0].prompt_id for g in groups]
            metrics.append(m)
        left = [i["instance_id"] for i in resumed.in_flight()]
        resumed.close()
    assert metrics[0]["agent/stream_regenerated_groups"] == 2 and metrics[1]["agent/stream_regenerated_groups"] == 0
    every = [i["instance_id"] for b in drawn for i in b]
    assert sorted(trained + left) == sorted(every) and len(set(trained)) == len(trained) == 8  # exactly once
    with pytest.raises(RuntimeError, match="restart\\(\\) is for a fresh stream"):
        first.groups = [object()]
        first.restart([])


def test_each_token_records_its_version_and_staleness_is_bounded_and_reported_per_token():
    """Partial rollouts (issue 59 item 2, between agent turns): task 3's episodes ran their first turn under
    version 0 and their second under version 1; each model token records the version that sampled it (observations
    -1), the joined training row keeps that alignment, and the per-token staleness of every step is within k = 1."""
    from swerl_jax.rl.producer import token_staleness
    from swerl_jax.rl.rollouts import joined_for_training

    out, _, _ = _run(3)
    t3 = out[1][0][0]
    for r in t3:
        model = r.token_mask.astype(bool)
        assert r.token_versions[model].tolist() == [0] * 3 + [1] * 3 and (r.token_versions[~model] == -1).all()
        joined = joined_for_training([[r]])[0][0][0]
        moved = len(r.prompt_tokens) - 1
        assert (joined.token_versions[:moved] == -1).all() and (joined.token_versions[moved:] == r.token_versions).all()
    # step 2: t3's tokens are 1 and 0 versions old (mean 0.5 over its 12 model tokens), t4's 0 (one turn, 6 tokens)
    mean, most = token_staleness(Groups.scored(out[1][0], 2), 2)
    assert (mean, most) == (6 / 18, 1)
    for step, (groups, _) in enumerate(out, start=1):
        assert token_staleness(Groups.scored(groups, 2), step)[1] <= 1
