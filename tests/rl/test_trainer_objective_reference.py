"""The GRPO trainer's optimised objective and its gradient against an independent float64 reference.

What runs is the trainer's own path: `trainer.make_rl_loss` (grpo_loss + `minibatch.scale_loss`), the step's
batch cut by `minibatch.make_parts` (rl.ppo_minibatches = n, loss scales), the jitted sharded step of
`Policy.train_step` (micro-batches weighted by `loss_weight`, 2 devices) and `minibatch.run_updates`
(rl.update_epochs passes). Only the model is swapped: `token_logprobs` becomes a bigram policy (embedding x head,
at the sampler's temperature), so the float64 reference can evaluate the same policy under `jax.enable_x64`.

The reference is written here from the formulas (DESIGN.md "Reference facts", `objectives` docstring) and calls
nothing of swerl_jax: per token pg (clip-high, dual clip; decoupled: ratio to the proximal policy times the
behaviour weight, dropped over the cap) + beta KL - entropy_coef H; the WHOLE batch's aggregate (token-mean over
all counted tokens; sequence means over the active rows, or all rows for rl.seq_mean_rows="all"; Dr.GRPO's token
sum / constant). Update i of an epoch optimises n x (the whole-batch objective restricted to minibatch i's rows),
so the n minibatch objectives average to the whole batch's at fixed params. Checked, per config:
  * every update's logged loss and grad_norm, and the params after all updates (plain SGD: a wrong gradient
    anywhere moves them), against the float64 trajectory of the same sequential SGD updates;
  * with the n updates accumulated into one (optax.MultiSteps, as optim.grad_accum_steps = n does): the one
    update equals SGD on the whole batch's float64 gradient and the logged losses average to its loss;
  * the advantages the trainer feeds in (`group_advantages`, the trainer's valid mask) against float64 formulas.
Tolerances (float32 trainer vs float64): losses and gradient norms rtol 1e-5 (atol 1e-6); parameter updates
1e-5 of the largest update entry + 4 float32 ulps of the params; advantages 1e-5. Measured: losses <= 2.1e-6 and
gradient norms <= 7.2e-7 relative, parameter updates <= 0.25 of that bound; a minibatch scale off by 1e-3 already
fails (by 1e-3), a wrong micro-batch weight, scale, proximal policy, temperature or epoch count by 0.2 or more.
The batch has an empty response, a zero-advantage group, truncated rows (compact filtering empties a whole
minibatch in one config) and padding with arbitrary log-probs. rl.ppo_minibatches must divide the rows
(`minibatch.check_minibatches`), so uneven splits cannot occur; minibatches of unequal token counts do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from swerl_jax import sharding
from swerl_jax.policy import Policy
from swerl_jax.rl import minibatch
from swerl_jax.rl import trainer as trainer_mod
from swerl_jax.rl.objectives import group_advantages
from swerl_jax.train_step import init_train_state, state_shardings
from tests.rl.loss_configs import loss_config

V, D = 11, 6  # bigram policy: vocabulary, embedding width
P, G = 3, 4  # groups x samples: 12 rows
B, PL, C = P * G, 3, 5  # rows, prompt length, completion length
TEMP = 0.7
LR = 0.5  # plain SGD: large enough that later updates' ratios move and clip
CLEN = np.array([5, 3, 0, 2, 4, 5, 1, 5, 5, 5, 5, 5])  # row 2 empty; 5 = C: truncated (group 2 entirely)
REWARDS = np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.3, 0.9], [0.2, 0.0, 1.0, 0.5]])  # group 0: no signal
RTOL, ATOL, PARAM_TOL = 1e-5, 1e-6, 1e-5
ULP = float(np.finfo(np.float32).eps)

# (id, loss config overrides, advantage, ppo_minibatches, micro-batches per update, update_epochs)
CASES = [
    # token-mean minibatches of 14 and 1 counted tokens (scales 28/15, 2/15)
    ("dapo-token-mean", dict(clip_eps_high=0.28, compact_filtering=True), "grpo", 2, 3, 2),
    ("swerl-seq-mean-token-mean-kl", dict(kl_coef=0.05, entropy_coef=0.01, loss_agg="seq-mean-token-mean"),
     "grpo", 2, 3, 1),
    ("seq-mean-token-sum-k1-dual", dict(kl_coef=0.1, kl_estimator="k1", dual_clip=3.0,
                                        loss_agg="seq-mean-token-sum"), "drgrpo", 3, 1, 1),
    ("deepswe-drgrpo-all-rows", dict(clip_eps_high=0.28, loss_agg="seq-mean-token-sum-norm", loss_norm=8.0,
                                     seq_mean_rows="all", compact_filtering=True), "loo", 2, 3, 2),
    # compact filtering empties minibatch 3 (group 2: all truncated): scale 0, a zero update
    ("decoupled-token-mean-cap-k2", dict(off_policy="decoupled", behav_weight_cap=1.3, kl_coef=0.05,
                                         kl_estimator="k2", dual_clip=3.0, compact_filtering=True), "grpo", 3, 2, 2),
    ("decoupled-seq-mean-n1", dict(off_policy="decoupled", loss_agg="seq-mean-token-mean", compact_filtering=True,
                                   entropy_coef=0.02), "loo", 1, 2, 2),
    # rl.mismatch_correction: weights of pi_prox / pi_sampler truncated (tis) or dropped (mis) at the cap
    ("tis-plain-token-mean", dict(mismatch_correction="tis", mismatch_cap=1.2, kl_coef=0.05), "grpo", 2, 3, 2),
    ("mis-decoupled-seq-mean", dict(off_policy="decoupled", mismatch_correction="mis", mismatch_cap=1.3,
                                    loss_agg="seq-mean-token-mean"), "grpo", 2, 2, 1),
]


def bigram(params, tokens, temperature, start, length):
    """Log-prob of each next token and the entropy at positions [start, start + length): logits emb[x] @ out / T."""
    ctx = tokens[:, start:start + length]
    tgt = tokens[:, start + 1:start + length + 1]
    logz = jax.nn.log_softmax(params["emb"][ctx] @ params["out"] / temperature, axis=-1)
    logp = jnp.take_along_axis(logz, tgt[..., None], axis=-1)[..., 0]
    return logp, -jnp.sum(jnp.exp(logz) * logz, axis=-1)


def fake_token_logprobs(model_config, params, tokens, attention_mask, with_entropy=False, temperature=1.0, start=0,
                        length=None, positions=None):
    """`model.llama.token_logprobs`'s contract for the bigram policy (repair rows: no score positions)."""
    del model_config, attention_mask
    assert positions is None and with_entropy
    return bigram(params, tokens, temperature, start, length)


# ------------------------------------------------------------------------------- float64 reference (x64 jnp)

def ref_per_token(logp, ent, b, cfg):
    """Per-token objective (0 off the counted tokens) and the counted-token mask, from the formulas."""
    mask = b["loss_mask"] * (1.0 - b["truncated"][:, None]) if cfg.compact_filtering else b["loss_mask"]
    on = mask > 0
    a = b["advantages"][:, None]
    # against the trainer's own log-probs before the update under decoupled, and under any mismatch correction
    base = b["prox_logp"] if cfg.off_policy == "decoupled" or cfg.mismatch_correction != "off" else b["old_logp"]
    ratio = jnp.exp(jnp.clip(jnp.where(on, logp - base, 0.0), -20, 20))
    pg = jnp.maximum(-a * ratio, -a * jnp.clip(ratio, 1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high))
    if cfg.dual_clip:
        pg = jnp.where(a < 0, jnp.minimum(pg, -a * cfg.dual_clip), pg)
    if cfg.mismatch_correction != "off":  # w = pi_prox / pi_sampler (replaces decoupled's weight)
        w = jnp.exp(jnp.clip(jnp.where(on, b["prox_logp"] - b["sampler_logp"], 0.0), -20, 20))
        cap = cfg.mismatch_cap
        pg = pg * (jnp.minimum(w, cap) if cfg.mismatch_correction == "tis" else jnp.where(w > cap, 0.0, w))
    elif cfg.off_policy == "decoupled":  # AReaL: w = pi_prox / pi_behav, a token over the cap weighs 0
        w = jnp.exp(jnp.clip(jnp.where(on, b["prox_logp"] - b["old_logp"], 0.0), -20, 20))
        pg = pg * jnp.where((cfg.behav_weight_cap > 0) & (w > cfg.behav_weight_cap), 0.0, w)
    d = jnp.where(on, logp - b["ref_logp"], 0.0)
    kl = {"k1": d, "k2": 0.5 * d * d, "k3": jnp.exp(-d) + d - 1.0}[cfg.kl_estimator]
    per = pg + cfg.kl_coef * kl - cfg.entropy_coef * ent
    return jnp.where(on, per, 0.0), mask


def ref_objective(params, b, cfg, rows, n):
    """n x (the whole batch's objective restricted to `rows`): the objective of the update on minibatch `rows`
    (n = 1 and every row: the whole batch's)."""
    logp, ent = bigram(params, b["tokens"], TEMP, PL - 1, C)
    per, mask = ref_per_token(logp, ent, b, cfg)
    counts = mask.sum(axis=1)
    if cfg.loss_agg == "token-mean":
        value, denom = per.sum(axis=1), counts.sum()
    else:
        row_norm = {"seq-mean-token-mean": jnp.maximum(counts, 1.0), "seq-mean-token-sum": 1.0,
                    "seq-mean-token-sum-norm": cfg.loss_norm}[cfg.loss_agg]
        value = per.sum(axis=1) / row_norm
        denom = float(B) if cfg.seq_mean_rows == "all" else (counts > 0).sum()
    return n * value[rows].sum() / jnp.maximum(denom, 1.0)


def ref_advantages(kind, valid):
    """Float64 group advantages over each group's valid samples (0 for the others and for flat groups)."""
    out = np.zeros((P, G))
    for p in range(P):
        x = REWARDS[p][valid[p]]
        if x.size < 2 or x.max() == x.min():
            continue
        if kind == "grpo":
            out[p, valid[p]] = (x - x.mean()) / (x.std() + 1e-6)
        elif kind == "drgrpo":
            out[p, valid[p]] = x - x.mean()
        else:  # loo
            out[p, valid[p]] = x - (x.sum() - x) / (x.size - 1)
    return out


# ------------------------------------------------------------------------------------------------ the trainer

def make_batch(cfg, kind, params):
    """A step's host batch as `rollouts.build_train_batch` lays it out (+ proximal / reference log-probs)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, V, (B, PL + C), dtype=np.int32)
    mask = (np.arange(C) < CLEN[:, None]).astype(np.float32)
    truncated = CLEN == C
    valid = ~truncated.reshape(P, G) if cfg.compact_filtering else np.ones((P, G), bool)  # DeepSWE's baseline
    adv = group_advantages(REWARDS, kind, 1e-6, 0, valid)
    np.testing.assert_allclose(adv, ref_advantages(kind, valid), rtol=1e-5, atol=1e-6)
    logp = np.asarray(jax.jit(bigram, static_argnums=(2, 3, 4))(params, tokens, TEMP, PL - 1, C)[0])
    noise = lambda sd: rng.normal(0, sd, (B, C)).astype(np.float32)
    old = ((logp + noise(0.3)) * mask).astype(np.float32)  # the sampler's: 0 on padding
    batch = {"tokens": tokens, "attention_mask": np.ones((B, PL + C), bool), "loss_mask": mask, "old_logp": old,
             "sampler_logp": old, "advantages": adv.reshape(-1), "truncated": truncated,
             "ref_logp": logp + noise(0.2)}
    if cfg.off_policy == "decoupled" or cfg.mismatch_correction != "off":  # the params before the update
        batch["prox_logp"] = logp
    return batch


def run_trainer(cfg, batch, params, n, micro, epochs, optimizer):
    """The trainer's updates of one step; (final params, metrics of every update in order)."""
    config = ml_collections.ConfigDict({"mesh": {"name": "cpu", "shape": {"data": 2, "fsdp": 1, "tensor": 1},
                                                 "dcn_shape": {"data": 1, "fsdp": 1, "tensor": 1},
                                                 "logical_axis_rules": ()}})
    mesh = sharding.create_mesh(config, devices=jax.devices()[:2])
    rules = sharding.logical_axis_rules(config)
    p_shard = jax.tree.map(lambda _: sharding.replicated(mesh), params)
    shardings = state_shardings(optimizer, p_shard, params, mesh)
    policy = Policy(None, mesh, rules, None, optimizer, init_train_state(params, optimizer, shardings), shardings)
    loss_fn = trainer_mod.make_rl_loss(None, cfg, PL, C, TEMP)
    parts = minibatch.make_parts(batch, n, cfg)
    step_fn = policy.train_step(loss_fn, parts[0], micro, key="test")
    state, first, last, updates = minibatch.run_updates(step_fn, policy.state, [policy.shard(p) for p in parts],
                                                        epochs)
    every = [first] + (updates if n > 1 else [jax.device_get(last)] * (last is not None))
    return jax.device_get(state.params), every


def close(actual, expected, what):
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=what)


def assert_params_close(actual, expected, start, what):
    """The update (params - start) of every leaf within PARAM_TOL of the reference update's largest entry, plus
    4 float32 ulps of the params (an update far smaller than the params is only that exact in float32)."""
    for key in start:
        ref = np.asarray(expected[key]) - start[key]
        err = np.abs(np.asarray(actual[key], np.float64) - start[key] - ref).max()
        bound = PARAM_TOL * np.abs(ref).max() + 4 * ULP * np.abs(start[key]).max()
        assert err <= bound, f"{what}: {key} update off by {err:.3g} (largest entry {np.abs(ref).max():.3g})"


@pytest.mark.parametrize("overrides,kind,n,micro,epochs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_trainer_updates_equal_float64_reference(monkeypatch, overrides, kind, n, micro, epochs):
    monkeypatch.setattr(trainer_mod, "token_logprobs", fake_token_logprobs)
    cfg = loss_config(**overrides)
    rng = np.random.default_rng(1)
    params = {"emb": rng.normal(0, 1, (V, D)).astype(np.float32), "out": rng.normal(0, 1, (D, V)).astype(np.float32)}
    batch = make_batch(cfg, kind, params)
    blocks = np.split(np.arange(B), n)

    with jax.enable_x64(True):
        b64 = {k: jnp.asarray(v, jnp.float64 if v.dtype == np.float32 else v.dtype) for k, v in batch.items()}
        grad = jax.jit(jax.value_and_grad(ref_objective), static_argnums=(2, 4))
        theta = {k: np.asarray(v, np.float64) for k, v in params.items()}
        ref_losses, ref_norms = [], []
        for _ in range(epochs):  # the sequential SGD updates: minibatch after minibatch, epoch after epoch
            for rows in blocks:
                loss, g = grad(theta, b64, cfg, jnp.asarray(rows), n)
                ref_losses.append(float(loss))
                ref_norms.append(float(np.sqrt(sum(np.sum(np.asarray(x) ** 2) for x in g.values()))))
                theta = {k: theta[k] - LR * np.asarray(g[k]) for k in theta}
        whole_loss, whole_grad = grad({k: np.asarray(v, np.float64) for k, v in params.items()}, b64, cfg,
                                      jnp.arange(B), 1)

    start = {k: np.asarray(v, np.float64) for k, v in params.items()}
    final, metrics = run_trainer(cfg, batch, params, n, micro, epochs, optax.sgd(LR))
    close([float(m["loss"]) for m in metrics], ref_losses, "loss")
    close([float(m["grad_norm"]) for m in metrics], ref_norms, "grad_norm")
    assert_params_close(final, theta, start, "sequential updates")
    if n * epochs > 1:  # the test means something only if later updates see moved ratios
        assert max(float(m["clip_frac"]) for m in metrics[1:]) > 0

    if n > 1:  # the n minibatch updates accumulated into one: the whole batch's gradient and loss at the start
        accumulated = optax.MultiSteps(optax.sgd(LR), every_k_schedule=n).gradient_transformation()
        final, metrics = run_trainer(cfg, batch, params, n, micro, 1, accumulated)
        close(np.mean([float(m["loss"]) for m in metrics]), float(whole_loss), "mean minibatch loss vs whole batch")
        expected = {k: start[k] - LR * np.asarray(whole_grad[k]) for k in start}
        assert_params_close(final, expected, start, "accumulated minibatches vs whole-batch gradient")


def test_trainer_updates_equal_float64_reference_on_a_dynamic_sampling_batch(monkeypatch):
    """rl.dynamic_sampling: draw 0 is REWARDS (group 0 has no signal: dropped), draw 1 refills the batch with its
    first signal group (its group 0 also has none); the trainer's update on the selected groups equals the float64
    reference of the objective on exactly those rewards."""
    from swerl_jax.rl.collector import Collector, Groups
    from swerl_jax.rl.dynamic import DynamicSampling
    from swerl_jax.rl.rollouts import Rollout

    second = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.5], [0.3, 0.3, 0.9, 0.0]])

    class TwoDraws(Collector):
        completion_cap, data_iter = C, None

        def collect(self, sampler, step, policy_version, draw=0):
            rewards = (REWARDS, second)[draw]
            return Groups.scored([[Rollout(prompt_id=f"{draw}-{p}", group=p, sample=s, prompt_tokens=np.zeros(1),
                                           completion_tokens=np.zeros(1), sampler_logprobs=np.zeros(1),
                                           finish_reason="stop", completion="", reward=float(rewards[p, s]))
                                   for s in range(G)] for p in range(P)], G)

    groups = DynamicSampling(TwoDraws(), P, max_draws=2).collect(None, 1, 0)
    selected = np.stack([REWARDS[1], REWARDS[2], second[1]])  # by hand: the signal groups in draw order
    np.testing.assert_array_equal(groups.rewards, selected)
    assert groups.metrics["dynamic/groups_dropped"] == 2 and groups.metrics["dynamic/groups_discarded"] == 1
    import sys

    monkeypatch.setattr(sys.modules[__name__], "REWARDS", selected)  # the batch and the reference read it
    test_trainer_updates_equal_float64_reference(monkeypatch, dict(clip_eps_high=0.28, compact_filtering=True), "grpo",
                                                 2, 3, 2)  # DAPO: clip-high, overlong filtering, dynamic sampling
