"""The GRPO trainer driven by a scripted collector (`rl.collector.Collector`): no sampler, no reward service, no
loader -- hand-made groups with hand-made rewards in, one update out. The advantages and the loss are the
hand-computed ones, the policy moves toward the rewarded sample, and the collector's contract (`Groups`,
exclusions, credit ends, state) is all the trainer reads."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from experiments import base
from swerl_jax.model.llama import token_logprobs
from swerl_jax.rl.collector import Collector, Groups
from swerl_jax.rl.objectives import group_advantages
from swerl_jax.rl.rollouts import Rollout, build_train_batch
from swerl_jax.rl.trainer import GRPOTrainer

PROMPT_LEN, COMPLETION_LEN = 64, 32  # the trainer's buckets for rows this short
STD_EPS = 1e-6


def _rollout(group: int, sample: int, prompt: list[int], completion: list[int], reward: float) -> Rollout:
    return Rollout(prompt_id=f"p{group}", group=group, sample=sample, prompt_tokens=np.asarray(prompt, np.int32),
                   completion_tokens=np.asarray(completion, np.int32),
                   sampler_logprobs=np.zeros(len(completion), np.float32), finish_reason="stop", completion="",
                   policy_version=0, reward=reward)


def _groups() -> list[list[Rollout]]:
    """Group 0: sample 0 (one token) is rewarded, samples 1-3 (two tokens each) are not. Group 1: four equal
    rewards (zero variance: no signal)."""
    g0 = [_rollout(0, 0, [5, 6, 7], [10], 1.0)] + [_rollout(0, s, [5, 6, 7], [20 + s, 30], 0.0) for s in (1, 2, 3)]
    g1 = [_rollout(1, s, [8, 9], [40 + s], 0.5) for s in range(4)]
    return [g0, g1]


class ScriptedCollector(Collector):
    """Hands the trainer the same scored groups every step and records what it was asked."""

    completion_cap = COMPLETION_LEN

    def __init__(self) -> None:
        self.data_iter = None
        self.calls: list[tuple] = []
        self.credited: list[np.ndarray] = []
        self.closed = False

    def collect(self, sampler, step: int, policy_version: int) -> Groups:
        self.calls.append((sampler, step, policy_version))
        return Groups.scored(_groups(), 4, times={"data_s": 0.0}, metrics={"scripted/steps": len(self.calls)})

    def credit(self, groups: Groups, advantages: np.ndarray):
        self.credited.append(advantages)
        return None, {}

    def close(self) -> None:
        self.closed = True


def _config():
    c = base.get_config()
    c.model.name = "tiny"  # vocab 512: the trainer never tokenizes, the collector hands it token ids
    c.data.max_prompt_len = PROMPT_LEN
    c.rl.update(num_steps=1, prompts_per_step=2, num_samples=4, advantage="grpo", std_eps=STD_EPS, std_ddof=0,
                kl_coef=0.0, loss_agg="token-mean", old_logprobs="recompute", micro_batch_size=0)
    c.optim.learning_rate = 1e-3
    c.logging.update(tensorboard=False, progress_bar=False)
    return c


def _row_logp(model_config, params, batch) -> np.ndarray:
    logp = token_logprobs(model_config, params, batch["tokens"], batch["attention_mask"], start=PROMPT_LEN - 1,
                          length=COMPLETION_LEN)
    return (np.asarray(logp) * batch["loss_mask"]).sum(axis=1)


def test_scripted_groups_in_loss_out(tmp_path):
    collector = ScriptedCollector()
    trainer = GRPOTrainer(_config(), tmp_path, collector)
    try:
        assert trainer.data_iter is None and trainer.host_state() == {}
        model_config = trainer.policy.model_config
        before = jax.device_get(trainer.policy.state.params)  # host copies: the state is donated to the update
        metrics, rows = trainer.train_step(1)  # no sampler was started: the collector needs none
    finally:
        trainer.close()
    assert collector.calls == [(None, 1, 0)] and collector.closed  # step 1 samples policy version 0

    # GRPO by hand: group 0 has mean 1/4 and population std sqrt(3)/4; group 1 has zero variance, so 0 throughout
    std = np.sqrt(3) / 4
    want = np.asarray([[0.75 / (std + STD_EPS)] + [-0.25 / (std + STD_EPS)] * 3, [0.0] * 4], np.float32)
    np.testing.assert_allclose(collector.credited[0], want, rtol=1e-6)
    np.testing.assert_allclose([r["advantage"] for r in rows], want.reshape(-1), rtol=1e-6)  # the rollout rows
    assert [(r["group"], r["sample"], r["reward"]) for r in rows] == [(r.group, r.sample, r.reward)
                                                                      for g in _groups() for r in g]
    assert metrics["advantage_max"] == pytest.approx(want.max()) and metrics["zero_variance_groups"] == 1
    assert metrics["reward_mean"] == pytest.approx(0.375) and metrics["scripted/steps"] == 1
    assert metrics["policy_version"] == 0 and metrics["nonfinite_update"] == 0 and "data_s" in metrics["time"]

    # the loss at ratio 1 (old log-probs recomputed: on-policy), token-mean over the 11 completion tokens:
    # -(A_0 * 1 token + 3 * A_i * 2 tokens + 0 * 4 tokens) / 11
    assert abs(metrics["ratio_mean"] - 1) < 1e-5
    hand = -(want[0, 0] * 1 + 3 * want[0, 1] * 2) / 11
    assert metrics["pg_loss"] == pytest.approx(hand, rel=1e-4) and metrics["loss"] == pytest.approx(hand, rel=1e-4)

    # and the update moved the policy toward the rewarded sample and away from the others of its group
    batch = build_train_batch(_groups(), PROMPT_LEN, COMPLETION_LEN, want)
    delta = (_row_logp(model_config, jax.device_get(trainer.policy.state.params), batch)
             - _row_logp(model_config, before, batch))
    assert delta[0] > 0 and (delta[1:4] < 0).all(), delta


def test_excluded_samples_leave_the_baseline_and_credit_ends_cut_the_loss_mask():
    """What the agent's collector uses, as arrays: an excluded sample (its environment failed) is out of its group's
    baseline and gets advantage 0; a credit end drops a row's tokens from the loss; no rollout is changed."""
    groups = _groups()
    excluded = np.zeros((2, 4), bool)
    excluded[0, 3] = True
    g = Groups.scored(groups, 4, excluded=excluded)
    np.testing.assert_array_equal(g.baseline_mask(), ~excluded)
    assert Groups.scored(groups, 4).baseline_mask() is None
    assert Groups.scored(groups, 4).baseline_mask(exclude_truncated=True).all()  # nothing hit max_new_tokens
    adv = group_advantages(g.rewards, "grpo", STD_EPS, 0, g.baseline_mask())
    std = np.sqrt(2) / 3  # rewards [1, 0, 0] of the three counted samples
    np.testing.assert_allclose(adv[0], [(2 / 3) / (std + STD_EPS), (-1 / 3) / (std + STD_EPS),
                                        (-1 / 3) / (std + STD_EPS), 0.0], rtol=1e-6)
    ends = np.full((2, 4), COMPLETION_LEN)
    ends[0, 1] = 1  # row (0, 1): only its first completion token keeps its credit
    batch = build_train_batch(groups, PROMPT_LEN, COMPLETION_LEN, adv, ends)
    np.testing.assert_array_equal(batch["loss_mask"][1, :3], [1, 0, 0])
    np.testing.assert_array_equal(batch["loss_mask"][2, :3], [1, 1, 0])
    assert [len(r.completion_tokens) for r in groups[0]] == [1, 2, 2, 2] and not hasattr(groups[0][1], "advantage")


def test_prompts_that_do_not_split_over_the_processes_are_one_line_naming_both_keys():
    from swerl_jax.rl.collector import prompt_share

    assert prompt_share(4, 2) == 2 and prompt_share(3, 1) == 3
    for prompts, processes, fit in ((1, 2, 2), (3, 2, 4)):  # 1 on 2 processes: one process had no prompt at all
        with pytest.raises(ValueError, match=rf"rl.prompts_per_step={prompts} does not split over the {processes} "
                                             rf"processes of this run \(mesh.num_processes={processes}\).* "
                                             rf"multiple of {processes} \(e.g. {fit}\)"):
            prompt_share(prompts, processes)
