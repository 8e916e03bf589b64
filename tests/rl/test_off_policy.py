"""rl.off_policy: the decoupled PPO loss (AReaL) against hand-computed numbers, and "plain" left as it was.

Expected values are written out in float64 below, independent of the implementation; tolerance 1e-6 (fp32).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.base import get_config
from swerl_jax.rl import objectives as obj
from swerl_jax.sections import read_sections
from tests.rl.loss_configs import loss_config

TOL = dict(rtol=1e-6, atol=1e-6)  # np.testing
APPROX = dict(rel=1e-6, abs=1e-6)  # pytest.approx


def _cfg(**overrides) -> obj.GRPOLossConfig:
    # loss_config only knows the plain fields; the off-policy ones are set on top.
    off = {k: overrides.pop(k) for k in ("off_policy", "behav_weight_cap") if k in overrides}
    cfg = dataclasses.replace(loss_config(**overrides), **off)
    cfg.validate()
    return cfg


# B=2, T=3, eps_low 0.2, eps_high 0.28, cap 2. Per token: r = pi / pi_prox, w = pi_prox / pi_behav.
#   (0,0) A=+1 r=1.1 w=1.5  inside the clip range:  max(-1.1, -1.1)  = -1.1  * 1.5 = -1.65
#   (0,1) A=+1 r=1.5 w=0.8  clipped high (1.28):    max(-1.5, -1.28) = -1.28 * 0.8 = -1.024
#   (0,2) A=+1 r=1.0 w=3.0  w > cap 2: dropped                                      =  0 (still counted)
#   (1,0) A=-1 r=0.5 w=1.2  clipped low (0.8):      max(0.5, 0.8)    =  0.8  * 1.2 =  0.96
#   (1,1) A=-1 r=4.0 w=0.5  unclipped 4; dual clip 3 bounds it: min(4, 3) = 3     -> 2.0 or 1.5
#   (1,2) masked (wild log-probs: w = e^10, r = e^-15), must not count anywhere
RATIO = np.array([[1.1, 1.5, 1.0], [0.5, 4.0, np.exp(-15.0)]])
WEIGHT = np.array([[1.5, 0.8, 3.0], [1.2, 0.5, np.exp(10.0)]])
OLD = np.array([[-1.0, -2.0, -0.5], [-3.0, -1.5, -20.0]])  # behaviour policy (the sampler's)
PROX = OLD + np.log(WEIGHT)
LOGP = PROX + np.log(RATIO)
ADV = np.array([1.0, -1.0])
MASK = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
PER_TOKEN = {0.0: np.array([[-1.65, -1.024, 0.0], [0.96, 2.0, 0.0]]),  # dual clip off
             3.0: np.array([[-1.65, -1.024, 0.0], [0.96, 1.5, 0.0]])}  # dual clip c = 3


def _args(**arrays):
    a = dict(logp=LOGP, old_logp=OLD, prox_logp=PROX, advantages=ADV, mask=MASK)
    a.update(arrays)
    return {k: jnp.asarray(v, jnp.float32) for k, v in a.items()}


@pytest.mark.parametrize("dual_clip", [0.0, 3.0])
def test_decoupled_loss_by_hand(dual_clip):
    cfg = _cfg(clip_eps_high=0.28, dual_clip=dual_clip, off_policy="decoupled", behav_weight_cap=2.0)
    a = _args()
    loss, m = obj.grpo_loss(a["logp"], a["old_logp"], None, a["advantages"], a["mask"], cfg,
                            prox_logp=a["prox_logp"])
    tok = PER_TOKEN[dual_clip]
    # token-mean over the 5 masked-in tokens: the dropped (0,2) stays in the denominator
    assert float(loss) == pytest.approx(tok.sum() / 5, **APPROX)  # 0.286 / 5 (off) or -0.214 / 5 (c = 3)
    assert float(m["pg_loss"]) == pytest.approx(tok.sum() / 5, **APPROX)
    assert float(m["loss_weight"]) == 5.0 and float(m["num_tokens"]) == 5.0
    assert float(m["behav_weight_mean"]) == pytest.approx((1.5 + 0.8 + 3.0 + 1.2 + 0.5) / 5, **APPROX)
    assert float(m["behav_weight_max"]) == pytest.approx(3.0, **APPROX)
    assert float(m["behav_trunc_frac"]) == pytest.approx(1 / 5, **APPROX)
    assert float(m["clip_frac"]) == pytest.approx(2 / 5, **APPROX)  # (0,1) high, (1,0) low
    assert float(m["ratio_mean"]) == pytest.approx((1.1 + 1.5 + 1.0 + 0.5 + 4.0) / 5, **APPROX)  # proximal ratio
    assert float(m["dual_clip_frac"]) == pytest.approx(1 / 5 if dual_clip else 0.0, **APPROX)

    # seq-mean-token-mean: row 0 (-1.65 - 1.024 + 0) / 3, row 1 (0.96 + t11) / 2; the mean of the two rows
    seq = dataclasses.replace(cfg, loss_agg="seq-mean-token-mean")
    loss, m = obj.grpo_loss(a["logp"], a["old_logp"], None, a["advantages"], a["mask"], seq,
                            prox_logp=a["prox_logp"])
    want = ((-1.65 - 1.024 + 0.0) / 3 + (0.96 + tok[1, 1]) / 2) / 2
    assert float(loss) == pytest.approx(want, **APPROX) and float(m["loss_weight"]) == 2.0

    # no cap: (0,2) counts with w = 3: A=+1, r = 1 -> -1 * 3 = -3
    uncapped = dataclasses.replace(cfg, behav_weight_cap=0.0)
    loss, m = obj.grpo_loss(a["logp"], a["old_logp"], None, a["advantages"], a["mask"], uncapped,
                            prox_logp=a["prox_logp"])
    assert float(loss) == pytest.approx((tok.sum() - 3.0) / 5, **APPROX) and float(m["behav_trunc_frac"]) == 0.0


def test_plain_ignores_prox_logp_bit_for_bit():
    cfg = _cfg(clip_eps_high=0.28, dual_clip=3.0, kl_coef=0.1, entropy_coef=0.01)
    a = _args()
    ref, ent = a["old_logp"] - 0.3, jnp.full(MASK.shape, 0.7)
    without = obj.grpo_loss(a["logp"], a["old_logp"], ref, a["advantages"], a["mask"], cfg, entropy=ent)
    given = obj.grpo_loss(a["logp"], a["old_logp"], ref, a["advantages"], a["mask"], cfg, entropy=ent,
                          prox_logp=a["prox_logp"])
    assert (cfg.off_policy, cfg.behav_weight_cap) == ("plain", 0.0)  # the defaults (loss_config sets neither)
    np.testing.assert_array_equal(np.asarray(given[0]), np.asarray(without[0]))
    assert given[1].keys() == without[1].keys() and not any(k.startswith("behav_") for k in given[1])
    for k in without[1]:
        np.testing.assert_array_equal(np.asarray(given[1][k]), np.asarray(without[1][k]), err_msg=k)


def test_decoupled_on_policy_equals_plain():
    rng = np.random.default_rng(0)
    old = rng.normal(-2.0, 0.5, (4, 6))
    logp = old + rng.normal(0.0, 0.3, old.shape)
    mask = (rng.random(old.shape) > 0.2).astype(np.float64)
    a = _args(logp=logp, old_logp=old, prox_logp=old, advantages=rng.normal(size=4), mask=mask)
    for extra in ({}, {"dual_clip": 3.0, "loss_agg": "seq-mean-token-sum"}):
        plain = _cfg(clip_eps_high=0.28, **extra)
        dec = dataclasses.replace(plain, off_policy="decoupled", behav_weight_cap=5.0)
        f = lambda lp, c: obj.grpo_loss(lp, a["old_logp"], None, a["advantages"], a["mask"], c,
                                        prox_logp=a["prox_logp"])[0]
        np.testing.assert_allclose(float(f(a["logp"], dec)), float(f(a["logp"], plain)), **TOL)
        np.testing.assert_allclose(jax.grad(f)(a["logp"], dec), jax.grad(f)(a["logp"], plain), **TOL)


def test_decoupled_gradient_flows_through_logp_only():
    cfg = _cfg(clip_eps_high=0.28, off_policy="decoupled", behav_weight_cap=2.0)
    a = _args()
    f = jax.jit(lambda lp, prox, old: obj.grpo_loss(lp, old, None, a["advantages"], a["mask"], cfg,
                                                    prox_logp=prox)[0])
    g_logp, g_prox, g_old = jax.grad(f, argnums=(0, 1, 2))(a["logp"], a["prox_logp"], a["old_logp"])
    np.testing.assert_array_equal(np.asarray(g_prox), 0.0)
    np.testing.assert_array_equal(np.asarray(g_old), 0.0)
    # d/dlogp of w * (-A r) / 5 where unclipped (r' = r): (0,0) -1.5 * 1.1 / 5; (1,1) +0.5 * 4 / 5; the clipped,
    # dropped and masked tokens get none
    want = np.array([[-1.5 * 1.1 / 5, 0.0, 0.0], [0.0, 0.5 * 4.0 / 5, 0.0]])
    np.testing.assert_allclose(np.asarray(g_logp), want, **TOL)


def test_errors_name_the_key():
    a = _args()
    with pytest.raises(ValueError, match="prox_logp"):
        obj.grpo_loss(a["logp"], a["old_logp"], None, a["advantages"], a["mask"], _cfg(off_policy="decoupled"))
    with pytest.raises(ValueError, match="rl.off_policy"):
        _cfg(off_policy="async")
    for cap in (0.5, 1.0, -1.0):
        with pytest.raises(ValueError, match="rl.behav_weight_cap"):
            _cfg(off_policy="decoupled", behav_weight_cap=cap)
    c = get_config()
    cfg = obj.GRPOLossConfig.from_config(c)
    assert (cfg.off_policy, cfg.behav_weight_cap) == (c.rl.off_policy, c.rl.behav_weight_cap)
    c.rl.off_policy = "decoupled"
    assert obj.GRPOLossConfig.from_config(c).off_policy == "decoupled"
    c.rl.behav_weight_cap = 1
    with pytest.raises(ValueError, match="rl.behav_weight_cap"):
        obj.GRPOLossConfig.from_config(c)
    c.rl.update(off_policy="stale", behav_weight_cap=0.0)
    with pytest.raises(ValueError, match="rl.off_policy"):
        obj.GRPOLossConfig.from_config(c)
    with pytest.raises(ValueError, match=r"rl.off_policy='stale' is not one of \['plain', 'decoupled'\]"):
        read_sections(c)


@pytest.mark.parametrize("dual_clip", [0.0, 3.0])
def test_negative_advantage_weight_is_bounded_only_by_the_dual_clip(dual_clip):
    """Issue 47 item 2: `neg_adv_weight_max` is the largest factor on -A of a negative-advantage token. Plain
    against a stale behaviour policy (ratio 14.1, as seen at k = 1) takes it unbounded unless the dual clip is on;
    decoupled multiplies the proximal factor by the behaviour weight ((1,1): r 4, w 0.5 -> 2.0, or 3 x 0.5)."""
    plain = _cfg(dual_clip=dual_clip)
    old = jnp.asarray([[-2.0, -1.0]])
    logp = old + jnp.log(jnp.asarray([[14.1, 0.5]]))
    _, m = obj.grpo_loss(logp, old, None, jnp.asarray([-1.0]), jnp.ones((1, 2)), plain)
    assert float(m["neg_adv_weight_max"]) == pytest.approx(dual_clip or 14.1, rel=1e-5)
    dec = _cfg(clip_eps_high=0.28, dual_clip=dual_clip, off_policy="decoupled", behav_weight_cap=2.0)
    a = _args()
    _, m = obj.grpo_loss(a["logp"], a["old_logp"], None, a["advantages"], a["mask"], dec, prox_logp=a["prox_logp"])
    assert float(m["neg_adv_weight_max"]) == pytest.approx(1.5 if dual_clip else 2.0, **APPROX)
