"""GRPO objectives against hand-computed numbers (written out below; tolerance 1e-6 fp32 unless stated)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.base import get_config
from swerl_jax.rl import objectives as obj
from tests.rl.loss_configs import loss_config

TOL = dict(rtol=1e-6, atol=1e-6)

REWARDS = np.array([[1.0, 0.0, 0.0, 1.0],
                    [0.5, 0.5, 0.5, 0.5],
                    [1.0, 0.0, -1.0, 0.0]], np.float32)


def test_grpo_advantage_ddof0():
    # row 0: mean .5, std .5; row 1: zero variance -> 0; row 2: mean 0, std sqrt(2/4)
    s = 1 / math.sqrt(0.5)
    want = [[1, -1, -1, 1], [0, 0, 0, 0], [s, 0, -s, 0]]
    np.testing.assert_allclose(obj.group_advantages(REWARDS, "grpo", std_eps=0.0 + 1e-12), want, **TOL)


def test_grpo_advantage_ddof1_and_eps():
    # row 0 sample std (ddof 1) = sqrt(1/3); eps 0.1 is added to the std
    a = 0.5 / (math.sqrt(1 / 3) + 0.1)
    got = obj.group_advantages(REWARDS[:1], "grpo", std_eps=0.1, std_ddof=1)
    np.testing.assert_allclose(got, [[a, -a, -a, a]], **TOL)


def test_drgrpo_and_loo_advantages():
    np.testing.assert_allclose(obj.group_advantages(REWARDS, "drgrpo"),
                               [[.5, -.5, -.5, .5], [0, 0, 0, 0], [1, 0, -1, 0]], **TOL)
    # r_i - mean of the other three: row 0: 1 - 1/3, 0 - 2/3; row 2: 1 - (-1/3), 0 - 0, -1 - 1/3, 0 - 0
    np.testing.assert_allclose(obj.group_advantages(REWARDS, "loo"),
                               [[2 / 3, -2 / 3, -2 / 3, 2 / 3], [0, 0, 0, 0], [4 / 3, 0, -4 / 3, 0]], **TOL)


def test_reinforce_advantage_is_the_reward_itself_except_in_a_zero_variance_group():
    np.testing.assert_allclose(obj.group_advantages(REWARDS, "reinforce"),
                               [[1, 0, 0, 1], [0, 0, 0, 0], [1, 0, -1, 0]], **TOL)
    binary = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # execution rewards: failures carry nothing
    np.testing.assert_array_equal(obj.group_advantages(binary, "reinforce"), [[1, 0, 0, 0], [0, 0, 0, 0]])


def test_advantage_errors_and_zero_variance_stats():
    with pytest.raises(ValueError, match="rl.advantage='nope'"):
        obj.group_advantages(REWARDS, "nope")
    with pytest.raises(ValueError, match="at least 2 samples"):
        obj.group_advantages(REWARDS[:, :1], "loo")
    with pytest.raises(ValueError, match=r"rewards must be \[prompts, samples\]"):
        obj.group_advantages(REWARDS[0], "grpo")
    np.testing.assert_array_equal(obj.zero_variance_groups(REWARDS), [False, True, False])
    stats = obj.advantage_stats(REWARDS, obj.group_advantages(REWARDS, "drgrpo"))
    assert float(stats["zero_variance_frac"]) == pytest.approx(1 / 3)
    assert int(stats["zero_variance_groups"]) == 1 and int(stats["no_signal_groups"]) == 1
    # a group whose only differing reward is left out of the baseline (an env error): zero variance does not see
    # it, the advantages do (all 0: no gradient)
    valid = np.ones(REWARDS.shape, bool)
    valid[0, REWARDS[0] != REWARDS[0, 0]] = False
    masked = obj.advantage_stats(REWARDS, obj.group_advantages(REWARDS, "grpo", valid=valid))
    assert int(masked["zero_variance_groups"]) == 1 and int(masked["no_signal_groups"]) == 2
    assert float(stats["reward_mean"]) == pytest.approx(4.0 / 12)  # (2 + 2 + 0) / 12
    assert float(stats["reward_min"]) == -1.0 and float(stats["advantage_max"]) == 1.0


def test_register_advantage_variant():
    @obj.register_advantage("test-sign")
    def _sign(rewards, std_eps, std_ddof):
        return jnp.sign(rewards - rewards.mean(-1, keepdims=True))
    try:
        np.testing.assert_allclose(obj.group_advantages(REWARDS[:1], "test-sign"), [[1, -1, -1, 1]])
        assert obj.register_advantage("test-sign")(_sign) is _sign  # the same function again: its file re-run
        with pytest.raises(ValueError, match="already registered"):  # another function under the name: refused
            obj.register_advantage("test-sign")(lambda rewards, std_eps, std_ddof: rewards)
    finally:
        del obj.ADVANTAGE_ESTIMATORS["test-sign"]


def test_kl_estimators():
    logp = jnp.array([-1.0, -2.0])
    ref = jnp.array([-1.5, -1.0])
    np.testing.assert_allclose(obj.kl_penalty(logp, ref, "k1"), [0.5, -1.0], **TOL)
    np.testing.assert_allclose(obj.kl_penalty(logp, ref, "k2"), [0.125, 0.5], **TOL)
    # k3: d = ref - logp = (-0.5, 1.0); e^-0.5 + 0.5 - 1 = 0.10653066; e - 2 = 0.71828183
    np.testing.assert_allclose(obj.kl_penalty(logp, ref, "k3"), [0.10653066, 0.71828183], **TOL)
    # masked padding with -inf log-probs gives 0, not NaN
    got = obj.kl_penalty(jnp.array([-1.0, -jnp.inf]), jnp.array([-1.5, 0.0]), "k3", jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(got, [math.exp(-0.5) + 0.5 - 1, 0.0], **TOL)
    with pytest.raises(ValueError, match="rl.kl_estimator='k4'"):
        obj.kl_penalty(logp, ref, "k4")


# Six tokens (ratio r, advantage A) with eps_low 0.2, eps_high 0.28, losses written out by hand:
#   A=1  r=1.5: max(-1.5, -1.28) = -1.28 clipped (high)   A=1  r=0.5: max(-0.5, -0.8) = -0.5
#   A=-1 r=0.5: max(0.5, 0.8)   = 0.8  clipped (low)      A=-1 r=1.5: max(1.5, 1.28)  = 1.5
#   A=-1 r=5:   max(5, 1.28)    = 5 (dual clip c=3: 3)    A=2  r=1.1: max(-2.2, -2.2) = -2.2
RATIOS = np.array([[1.5, 0.5, 0.5, 1.5, 5.0, 1.1]], np.float32)
ADVS = np.array([[1.0, 1.0, -1.0, -1.0, -1.0, 2.0]], np.float32)


def _pl(dual=0.0, mask=None):
    old = jnp.full(RATIOS.shape, -2.0)
    logp = old + jnp.log(RATIOS)
    mask = jnp.ones(RATIOS.shape) if mask is None else mask
    return obj.policy_loss(logp, old, jnp.asarray(ADVS), mask, 0.2, 0.28, dual)


def test_policy_loss_clip_high():
    loss, m = _pl()
    np.testing.assert_allclose(loss, [[-1.28, -0.5, 0.8, 1.5, 5.0, -2.2]], rtol=1e-5)
    assert float(m["clip_frac"]) == pytest.approx(2 / 6)
    assert float(m["clip_frac_high"]) == pytest.approx(1 / 6)
    assert float(m["clip_frac_low"]) == pytest.approx(1 / 6)
    assert float(m["dual_clip_frac"]) == 0.0
    assert float(m["ratio_max"]) == pytest.approx(5.0, rel=1e-5)


def test_policy_loss_dual_clip_and_mask():
    loss, m = _pl(dual=3.0)
    np.testing.assert_allclose(loss, [[-1.28, -0.5, 0.8, 1.5, 3.0, -2.2]], rtol=1e-5)
    assert float(m["dual_clip_frac"]) == pytest.approx(1 / 6)
    loss, m = _pl(mask=jnp.array([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]]))
    assert float(loss[0, 5]) == 0.0
    assert float(m["clip_frac"]) == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="dual_clip"):
        _pl(dual=0.5)


X = np.array([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [5.0, 6.0, 0.0, 0.0]], np.float32)
M = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], np.float32)  # row 2 masked out entirely


@pytest.mark.parametrize("mode,norm,want", [
    ("token-mean", 0, (1 + 2 + 3 + 4) / 4),
    ("seq-mean-token-mean", 0, (2 + 4) / 2),
    ("seq-mean-token-sum", 0, (6 + 4) / 2),
    ("seq-mean-token-sum-norm", 4, (6 / 4 + 4 / 4) / 2),
])
def test_aggregate_loss(mode, norm, want):
    assert float(obj.aggregate_loss(jnp.asarray(X), jnp.asarray(M), mode, norm)) == pytest.approx(want)


@pytest.mark.parametrize("mode", sorted(obj.LOSS_AGGREGATORS))
def test_aggregation_weight_makes_micro_batches_exact(mode):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 5)).astype(np.float32)
    mask = (rng.random((6, 5)) < 0.6).astype(np.float32)
    mask[4] = 0  # a fully masked row
    full = float(obj.aggregate_loss(x, mask, mode, 5.0))
    parts = [(float(obj.aggregate_loss(x[s], mask[s], mode, 5.0)), float(obj.aggregation_weight(mask[s], mode)))
             for s in (slice(0, 2), slice(2, 6))]
    assert sum(v * w for v, w in parts) / sum(w for _, w in parts) == pytest.approx(full, rel=1e-5)


def test_aggregate_errors():
    with pytest.raises(ValueError, match="rl.loss_agg='sum'"):
        obj.aggregate_loss(jnp.asarray(X), jnp.asarray(M), "sum")
    with pytest.raises(ValueError, match="positive normaliser"):
        obj.aggregate_loss(jnp.asarray(X), jnp.asarray(M), "seq-mean-token-sum-norm", 0)


def test_logprob_mismatch():
    sampler = jnp.array([[-1.0, -2.0, -3.0]])
    trainer = jnp.array([[-1.5, -1.0, -jnp.inf]])  # the padded third token must not leak in
    m = obj.logprob_mismatch(sampler, trainer, jnp.array([[1.0, 1.0, 0.0]]))
    # d = trainer - sampler = (-0.5, 1.0): |d| mean 0.75; k3 e^d - d - 1 = 0.10653066, 0.71828183
    assert float(m["logprob_abs_diff"]) == pytest.approx(0.75)
    assert float(m["logprob_max_abs_diff"]) == pytest.approx(1.0)
    assert float(m["logprob_kl_k3"]) == pytest.approx((0.10653066 + 0.71828183) / 2, abs=1e-6)
    assert float(m["logprob_ratio_mean"]) == pytest.approx((math.exp(-0.5) + math.e) / 2, abs=1e-6)


def test_compact_filter_mask():
    got = obj.compact_filter_mask(jnp.ones((3, 2)), jnp.array([False, True, False]))
    np.testing.assert_array_equal(got, [[1, 1], [0, 0], [1, 1]])


# grpo_loss on B=2, T=2 with ratio 1, A = (1, -1), ref = logp - 0.2 (k1 = 0.2), entropy 0.5:
#   per-token = -A + 0.1 * 0.2 - 0.01 * 0.5 -> row 0: -0.985, row 1: 1.015; token-mean = 0.015
#   d loss / d logp (token-mean over 4, unclipped at ratio 1): (-A + beta) / 4 -> -0.225, 0.275
LOGP = jnp.array([[-1.0, -2.0], [-0.5, -3.0]])
CFG = loss_config(kl_coef=0.1, kl_estimator="k1", entropy_coef=0.01)


def _grpo(cfg=CFG, truncated=None, logp=LOGP):
    return obj.grpo_loss(logp, LOGP, LOGP - 0.2, jnp.array([1.0, -1.0]), jnp.ones((2, 2)), cfg,
                         entropy=jnp.full((2, 2), 0.5), truncated=truncated)


def test_grpo_loss_value_metrics_and_grad():
    loss, m = jax.jit(_grpo, static_argnames="cfg")(CFG)
    assert float(loss) == pytest.approx(0.015, abs=1e-6)
    assert float(m["kl"]) == pytest.approx(0.2, abs=1e-6)
    assert float(m["entropy"]) == pytest.approx(0.5)
    assert float(m["pg_loss"]) == pytest.approx(0.0, abs=1e-6)
    assert float(m["clip_frac"]) == 0.0 and float(m["num_tokens"]) == 4.0 and float(m["loss_weight"]) == 4.0
    grad = jax.grad(lambda lp: _grpo(logp=lp)[0])(LOGP)
    np.testing.assert_allclose(grad, [[-0.225, -0.225], [0.275, 0.275]], **TOL)


def test_grpo_loss_compact_filtering_and_padding():
    cfg = loss_config(kl_coef=0.1, kl_estimator="k1", entropy_coef=0.01, compact_filtering=True)
    loss, m = _grpo(cfg, truncated=jnp.array([False, True]))
    assert float(loss) == pytest.approx(-0.985, abs=1e-6)  # only row 0 counts
    assert float(m["filtered_frac"]) == 0.5 and float(m["truncated_frac"]) == 0.5
    # -inf log-probs on padding: finite loss and gradient
    pad = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    f = lambda lp: obj.grpo_loss(lp, LOGP, LOGP - 0.2, jnp.array([1.0, -1.0]), pad,
                                 loss_config(kl_coef=0.1))[0]
    lp = LOGP.at[0, 1].set(-jnp.inf)
    assert np.isfinite(float(f(lp))) and np.isfinite(np.asarray(jax.grad(f)(lp))).all()


def test_grpo_loss_config_from_base_and_errors():
    c = get_config()
    cfg = obj.GRPOLossConfig.from_config(c)
    assert cfg.kl_coef == c.rl.kl_coef and cfg.loss_norm == c.sampler.max_new_tokens and cfg.needs_reference
    c.rl.update(kl_coef=0.1, kl_estimator="k1", entropy_coef=0.01)
    assert float(_grpo(c)[0]) == pytest.approx(0.015, abs=1e-6)  # a ConfigDict works as cfg too
    c.rl.loss_agg = "seq-mean-token-sum-norm"
    with pytest.raises(ValueError, match="rl.loss_norm"):
        obj.GRPOLossConfig.from_config(c.rl)  # the rl section alone cannot resolve loss_norm = 0
    c.rl.kl_estimator = "k9"
    with pytest.raises(ValueError, match="rl.kl_estimator"):
        obj.GRPOLossConfig.from_config(c)
    with pytest.raises(ValueError, match="ref_logp"):
        obj.grpo_loss(LOGP, LOGP, None, jnp.array([1.0, -1.0]), jnp.ones((2, 2)), loss_config(kl_coef=0.1))
    with pytest.raises(ValueError, match="truncated"):
        _grpo(loss_config(compact_filtering=True))
