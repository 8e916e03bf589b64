"""One RL update on multi-turn rows moves the policy the way the advantages say, and only through the model's own
tokens: agent_tiny_cpu's loss (REINFORCE or leave-one-out advantages, clip-high, Dr.GRPO token-sum norm) on a tiny
Llama, rows packed by `build_train_batch` from rollouts whose completions interleave model turns with tool
observations."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from experiments import agent_tiny_cpu
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params, token_logprobs
from swerl_jax.optim import make_optimizer
from swerl_jax.rl.advantages import group_advantages
from swerl_jax.rl.objectives import GRPOLossConfig
from swerl_jax.rl.rollouts import Rollout, build_train_batch, joined_for_training
from swerl_jax.rl.trainer import make_rl_loss

MODEL = get_model_config("tiny", num_heads=4, num_kv_heads=2, hidden_size=32, intermediate_size=64, vocab_size=96,
                         num_layers=2)
PROMPT, COMP, TURN, OBS = 8, 40, 8, 6  # a completion: model turn, observation, model turn, observation, model turn


def _episodes(rng: np.random.Generator) -> list[list[Rollout]]:
    """Two groups of four episodes; per group two resolved (reward 1) and two not, of varied lengths."""
    groups = []
    for p in range(2):
        prompt = rng.integers(1, MODEL.vocab_size, PROMPT, dtype=np.int32)
        group = []
        for g in range(4):
            turns = 3 if g % 2 == 0 else 2
            tokens, mask = [], []
            for t in range(turns):
                tokens += list(rng.integers(1, MODEL.vocab_size, TURN))
                mask += [1.0] * TURN
                if t < turns - 1:
                    tokens += list(rng.integers(1, MODEL.vocab_size, OBS))
                    mask += [0.0] * OBS
            tokens = np.asarray(tokens, np.int32)
            group.append(Rollout(prompt_id=f"task{p}", group=p, sample=g, prompt_tokens=prompt,
                                 completion_tokens=tokens, sampler_logprobs=np.zeros(len(tokens), np.float32),
                                 finish_reason="stop", completion="", reward=float(g < 2),
                                 token_mask=np.asarray(mask, np.float32), termination="finish"))
        groups.append(group)
    return groups


def _batch(groups: list[list[Rollout]], params, config) -> dict:
    rewards = np.asarray([[r.reward for r in g] for g in groups])
    adv = group_advantages(rewards, str(config.rl.advantage), float(config.rl.std_eps), int(config.rl.std_ddof))
    batch = build_train_batch(groups, PROMPT, COMP, adv)
    # on-policy: the sampler's log-probs are the policy's own (what the engine reports, within 1e-5)
    batch["old_logp"] = np.asarray(_logp(params, batch)) * batch["loss_mask"]
    batch["sampler_logp"] = batch["old_logp"]
    return batch


_LOGP = jax.jit(lambda params, tokens, mask: token_logprobs(MODEL, params, tokens, mask, start=PROMPT - 1,
                                                             length=COMP))


def _logp(params, batch) -> np.ndarray:
    return np.asarray(_LOGP(params, batch["tokens"], batch["attention_mask"]))


def _update(params, batch, config):
    loss_cfg = GRPOLossConfig.from_config(config)
    loss_fn = make_rl_loss(MODEL, loss_cfg, PROMPT, COMP, 1.0)
    optimizer = make_optimizer(config.optim, 1, 1e-3)
    grads, metrics = jax.jit(jax.grad(loss_fn, has_aux=True))(params, batch)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    return jax.tree.map(lambda p, u: p + u, params, updates), grads, metrics


@pytest.mark.parametrize("advantage", ["loo", "reinforce"])
def test_an_agent_update_raises_resolved_episodes_and_lowers_the_rest_through_model_tokens_only(advantage):
    config = agent_tiny_cpu.get_config("short")
    assert config.rl.advantage == "reinforce" and config.rl.loss_agg == "seq-mean-token-sum-norm"
    config.rl.advantage = advantage  # DeepSWE's leave-one-out, and the config's REINFORCE (failures carry 0)
    params = jax.device_get(jax.jit(init_params, static_argnums=0)(MODEL, jax.random.key(0)))
    batch = _batch(_episodes(np.random.default_rng(0)), params, config)
    assert set(np.unique(batch["loss_mask"])) == {0.0, 1.0} and "score_positions" in batch

    new_params, grads, metrics = _update(params, batch, config)
    assert abs(float(metrics["ratio_mean"]) - 1.0) < 1e-5  # on-policy
    delta = (_logp(new_params, batch) - batch["old_logp"]) * batch["loss_mask"]
    per_row = delta.sum(axis=1) / batch["loss_mask"].sum(axis=1)
    adv = batch["advantages"]
    # every resolved episode's own tokens became more likely, every failed one's less (the update is small: lr 1e-3,
    # one step, so first order holds row by row)
    assert (per_row[adv > 0] > 0).all() and (per_row[adv < 0] < 0).all(), (per_row, adv)
    assert (adv > 0).any() and ((adv < 0).any() if advantage == "loo" else (adv >= 0).all())

    # the observations are not the model's actions: what their slots hold never reaches the gradient
    noisy = dict(batch)
    lengths = np.asarray([len(r.completion_tokens) for g in _episodes(np.random.default_rng(0)) for r in g])
    obs = (batch["loss_mask"] == 0) & (np.arange(COMP) < lengths[:, None])
    assert obs.any()
    noisy["old_logp"] = np.where(obs, -50.0, batch["old_logp"]).astype(np.float32)
    noisy["sampler_logp"] = noisy["old_logp"]
    _, noisy_grads, _ = _update(params, noisy, config)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(noisy_grads)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("loss_agg", ["seq-mean-token-sum-norm", "seq-mean-token-mean"])
def test_an_episode_trains_as_one_row_of_at_most_its_context_with_the_same_loss_and_gradient(loss_agg):
    """`rollouts.joined_for_training`: an episode's task prompt moves into its completion (mask 0), so a batch whose
    longest task and longest transcript are different episodes is max_context wide, not max_prompt_len +
    max_context (64k for DeepSWE). The loss, its gradient and the masked log-probs are the split layout's, with
    an until-error credit cut moved along (float32: loss rtol 1e-5 atol 1e-6, log-probs rtol 1e-5, gradients
    rtol 1e-4)."""
    config = agent_tiny_cpu.get_config("short")
    config.rl.loss_agg = loss_agg
    rng = np.random.default_rng(1)
    groups = []
    for p, (prompt_len, turns) in enumerate([(20, 1), (3, 3)]):  # a long task with short episodes, and the reverse
        prompt = rng.integers(1, MODEL.vocab_size, prompt_len, dtype=np.int32)
        group = []
        for g in range(2):
            tokens = rng.integers(1, MODEL.vocab_size, turns * (TURN + OBS) - OBS - g, dtype=np.int32)
            mask = np.asarray([float(i % (TURN + OBS) < TURN) for i in range(len(tokens))], np.float32)
            group.append(Rollout(prompt_id=f"t{p}", group=p, sample=g, prompt_tokens=prompt, completion_tokens=tokens,
                                 sampler_logprobs=np.zeros(len(tokens), np.float32), finish_reason="stop",
                                 completion="", reward=float(g), token_mask=mask, termination="finish"))
        groups.append(group)
    adv = np.asarray([[-1.0, 1.0], [-1.0, 1.0]])
    credit_end = np.asarray([[TURN // 2, 10**6], [TURN + OBS + 3, 10**6]])  # two failed episodes cut mid-turn
    params = jax.device_get(jax.jit(init_params, static_argnums=0)(MODEL, jax.random.key(0)))
    loss_cfg = GRPOLossConfig.from_config(config)

    def loss_and_grad(rows, ends, prompt_width, completion_width):
        batch = build_train_batch(rows, prompt_width, completion_width, adv, ends)
        logp = jax.jit(lambda p, t, m: token_logprobs(MODEL, p, t, m, start=prompt_width - 1,
                                                      length=completion_width))
        batch["old_logp"] = np.asarray(logp(params, batch["tokens"], batch["attention_mask"])) * batch["loss_mask"]
        batch["sampler_logp"] = batch["old_logp"] * 0.9  # a sampler that disagrees a little: the mismatch terms
        loss_fn = make_rl_loss(MODEL, loss_cfg, prompt_width, completion_width, 1.0)
        (loss, _), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params, batch)
        return float(loss), grads, batch

    split_loss, split_grads, split = loss_and_grad(groups, credit_end, 20, 3 * (TURN + OBS) - OBS)
    rows, ends = joined_for_training(groups, credit_end)
    width = max(len(r.completion_tokens) for g in rows for r in g)
    joined_loss, joined_grads, joined = loss_and_grad(rows, ends, 1, width)
    assert 1 + width < 20 + 3 * (TURN + OBS) - OBS  # narrower: 37 columns, not 54
    assert all(len(r.prompt_tokens) == 20 for r in groups[0])  # the rollouts (and their logs) are unchanged
    assert split["loss_mask"].sum() == joined["loss_mask"].sum() and split["loss_mask"].sum() < sum(
        r.token_mask.sum() for g in groups for r in g)  # the credit cuts hold in both
    np.testing.assert_allclose(np.sort(split["old_logp"][split["loss_mask"] > 0]),
                               np.sort(joined["old_logp"][joined["loss_mask"] > 0]), rtol=1e-5, atol=1e-6)
    # seq-mean-token-mean's loss here is O(1) terms (advantages -1 and +1 at ratio 1) that cancel to ~0: float32
    # rounds that cancellation differently per layout (0.0 vs -6e-8 on an Intel Xeon host), so an absolute 1e-6 too
    np.testing.assert_allclose(joined_loss, split_loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(split_grads), jax.tree.leaves(joined_grads)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-7)
