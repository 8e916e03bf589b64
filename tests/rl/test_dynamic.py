"""rl.dynamic_sampling (`rl.dynamic.DynamicSampling`): zero-variance groups dropped, more prompts drawn until the step
is full, the draws bounded and counted, a resumed run drawing exactly the prompts of an uninterrupted one, and the
batch's advantages against a float64 reference of the selection."""

from __future__ import annotations

import grain
import numpy as np
import pytest

from experiments import base
from swerl_jax.resolve import resolve_config
from swerl_jax.rl.collect import draw_seed
from swerl_jax.rl.collector import Collector, Groups
from swerl_jax.rl.dynamic import DynamicSampling, merge_metrics, signal_groups
from swerl_jax.rl.objectives import group_advantages
from swerl_jax.rl.rollouts import Rollout

P, G = 4, 4


def rewards_of(prompt: int, seed: int) -> np.ndarray:
    """A prompt's G rewards: ids = 0 mod 3 always all 1, = 1 mod 3 all 0 (no signal); the others a 0/1 pattern
    that depends on the draw's seed, all equal when it is 0 mod 4 (so a seed decides some groups)."""
    if prompt % 3 == 0:
        return np.ones(G)
    if prompt % 3 == 1:
        return np.zeros(G)
    return np.asarray([float((prompt + seed + s) % 4 == 0) for s in range(G)])


class Draws(Collector):
    """Prompts from a seeded Grain iterator (checkpointable state), P per draw, rewards from `rewards_of`."""

    completion_cap = 8

    def __init__(self, reward=rewards_of) -> None:
        self.data_iter = iter(grain.MapDataset.range(10_000).shuffle(seed=3).to_iter_dataset().batch(P))
        self.reward = reward
        self.calls: list[tuple[int, int]] = []
        self.closed = False

    def collect(self, sampler, step: int, policy_version: int, draw: int = 0) -> Groups:
        ids = [int(i) for i in np.asarray(next(self.data_iter)).reshape(-1)]
        self.calls.append((step, draw))
        seed = draw_seed(step, draw)
        groups = [[Rollout(prompt_id=str(i), group=p, sample=s, prompt_tokens=np.asarray([1, 2], np.int32),
                           completion_tokens=np.asarray([3 + s], np.int32),
                           sampler_logprobs=np.zeros(1, np.float32), finish_reason="stop", completion="",
                           policy_version=policy_version, reward=float(r))
                   for s, r in enumerate(self.reward(i, seed))] for p, i in enumerate(ids)]
        return Groups.scored(groups, G, times={"data_s": 1.0, "generate_s": 2.0, "hidden_frac": 0.25 * (draw + 1)},
                             metrics={"turns_max": float(draw), "rate": float(draw), "service": {"items": step}})

    def close(self) -> None:
        self.closed = True


def reference(step: int, ids: list[list[int]], max_draws: int) -> tuple[list[int], np.ndarray, int]:
    """From the formula, in float64: the prompts drawn (P per draw) give groups; keep those with max > min in
    draw order until P; past max_draws fill with the dropped ones. Returns (kept prompt ids, rewards, draws)."""
    kept, dropped, draws = [], [], 0
    for d, batch in enumerate(ids[:max_draws]):
        draws += 1
        for i in batch:
            r = rewards_of(i, draw_seed(step, d))
            (kept if r.max() > r.min() else dropped).append((i, r))
        if len(kept) >= P:
            break
    chosen = (kept + dropped)[:P]
    return [i for i, _ in chosen], np.stack([r for _, r in chosen]).astype(np.float64), draws


def prompt_order(n: int) -> list[list[int]]:
    it = iter(grain.MapDataset.range(10_000).shuffle(seed=3).to_iter_dataset().batch(P))
    return [[int(i) for i in np.asarray(next(it))] for _ in range(n)]


def test_steps_are_filled_with_signal_groups_as_the_float64_reference_selects():
    inner = Draws()
    dyn = DynamicSampling(inner, P, max_draws=8)
    order, used = prompt_order(64), 0
    for step in (1, 2, 3):
        groups = dyn.collect(None, step, step - 1)
        want_ids, want_rewards, draws = reference(step, order[used:], 8)
        used += draws
        assert [g[0].prompt_id for g in groups.rollouts] == [str(i) for i in want_ids]
        np.testing.assert_array_equal(groups.rewards, want_rewards)
        assert signal_groups(groups.rewards).all() and groups.metrics["dynamic/groups_filled"] == 0
        assert [[r.group for r in g] for g in groups.rollouts] == [[p] * G for p in range(P)]  # renumbered
        m = groups.metrics
        assert m["dynamic/draws"] == draws and m["dynamic/prompts_drawn"] == draws * P > P
        assert m["dynamic/groups_dropped"] + m["dynamic/groups_discarded"] + P == draws * P
        assert m["dynamic/kept_frac"] == pytest.approx(P / (draws * P))
        assert m["dynamic/generated_tokens"] == draws * P * G  # one token a sample, the dropped groups' too
        # every draw's time adds up; a fraction is averaged; maxima the largest, rates weighted, counters the last
        assert groups.times["generate_s"] == 2.0 * draws
        assert groups.times["hidden_frac"] == pytest.approx(0.25 * (draws + 1) / 2)
        assert m["turns_max"] == draws - 1 and m["rate"] == pytest.approx((draws - 1) / 2)
        assert m["service"] == {"items": step}
        # the advantages the trainer computes of this batch: the float64 GRPO formula, none zero
        want = (want_rewards - want_rewards.mean(1, keepdims=True)) / (want_rewards.std(1, keepdims=True) + 1e-6)
        np.testing.assert_allclose(group_advantages(groups.rewards, "grpo"), want, rtol=1e-6, atol=1e-7)
    assert inner.calls[:2] == [(1, 0), (1, 1)]  # each extra draw is numbered (another seed)
    assert draw_seed(7, 0) == 7 and len({draw_seed(7, d) for d in range(5)}) == 5


def test_draws_are_bounded_and_a_short_batch_is_filled_and_counted():
    inner = Draws(reward=lambda i, seed: np.ones(G))  # no group ever has a signal
    groups = DynamicSampling(inner, P, max_draws=3).collect(None, 1, 0)
    m = groups.metrics
    assert len(inner.calls) == 3 and m["dynamic/draws"] == 3 and m["dynamic/prompts_drawn"] == 12
    assert m["dynamic/groups_filled"] == P and m["dynamic/groups_dropped"] == 12 - P and m["dynamic/kept_frac"] == 0
    assert m["dynamic/generated_tokens"] == 12 * G
    assert groups.rewards.shape == (P, G)  # the batch keeps its shape
    with pytest.raises(ValueError, match="rl.dynamic_sampling_max_draws must be >= 1"):
        DynamicSampling(inner, P, max_draws=0)


def test_excluded_and_truncated_samples_do_not_count_towards_a_signal():
    rewards = np.array([[1.0, 0.0, 1.0], [1.0, 0.0, 1.0], [0.5, 0.5, 0.5]])
    valid = np.array([[True, False, True], [True, True, False], [True, True, True]])
    np.testing.assert_array_equal(signal_groups(rewards, valid), [False, True, False])
    np.testing.assert_array_equal(signal_groups(rewards[:, :1]), [False] * 3)  # one sample: no group
    assert merge_metrics([{"a": 1.0, "b_max": 1}, {"a": 3.0, "b_max": 0}], [1, 3]) == {"a": 2.5, "b_max": 1}


def test_a_resumed_run_draws_exactly_the_prompts_of_an_uninterrupted_one():
    """The checkpoint holds the data iterator's state (`data_iter`, as the loop saves it) after every draw of the
    step: steps 3-4 resumed from the state after step 2 draw what an uninterrupted run's 3-4 drew."""
    full = DynamicSampling(Draws(), P, max_draws=8)
    seen = [[g[0].prompt_id for g in full.collect(None, s, s - 1).rollouts] for s in (1, 2, 3, 4)]
    first = DynamicSampling(Draws(), P, max_draws=8)
    for s in (1, 2):
        first.collect(None, s, s - 1)
    state = first.data_iter.get_state()
    resumed = DynamicSampling(Draws(), P, max_draws=8)
    resumed.data_iter.set_state(state)  # what Checkpointer.restore_latest does with the loop's data_iter
    assert [[g[0].prompt_id for g in resumed.collect(None, s, s - 1).rollouts] for s in (3, 4)] == seen[2:]
    assert len({i for step in seen for i in step}) == 4 * P  # no prompt twice


def test_config_keys_and_the_streaming_refusal():
    c = base.get_config()
    assert c.rl.dynamic_sampling is False and c.rl.dynamic_sampling_max_draws >= 1  # off: one draw per step
    c.rl.update(task="agent", max_staleness=1, dynamic_sampling=True)
    c.agent.stream_ahead_batches = 1
    with pytest.raises(ValueError, match="rl.dynamic_sampling needs .*agent.stream_ahead_batches=0"):
        resolve_config(c, check_files=False)



def test_the_wrapper_is_the_inner_collectors_position_state_credit_and_close():
    inner = Draws()
    dyn = DynamicSampling(inner, P, max_draws=2)
    assert dyn.data_iter is inner.data_iter and dyn.completion_cap == inner.completion_cap
    other = iter(grain.MapDataset.range(8).to_iter_dataset().batch(P))
    dyn.data_iter = other  # the loop restores a checkpoint's iterator through the trainer's data_iter
    assert inner.data_iter is other and dyn.state_dict() == {} and dyn.credit(None, None) == (None, {})
    with pytest.raises(ValueError, match="draws by itself"):
        dyn.collect(None, 1, 0, draw=1)
    dyn.close()
    assert inner.closed
