"""Every objective function against an independent float64 numpy reference, written here from the formulas.

The reference does not call swerl_jax: group statistics, KL estimators, the clipped surrogate (clip-high, dual
clip, the log-ratio clamp), every loss aggregation (active / all rows) and the whole GRPO loss are re-derived
below in float64 and compared over random cases with padding, empty rows and extreme ratios; tolerance 1e-5
(relative as well where a ratio of e^20 makes the loss itself ~1e8).
"""

import numpy as np
import pytest

from swerl_jax.rl import objectives as obj
from tests.rl.loss_configs import loss_config

TOL = dict(rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ float64 reference (numpy only)

def ref_advantages(r, kind, eps=1e-6, ddof=0, valid=None):
    r = np.asarray(r, np.float64)
    valid = np.ones(r.shape, bool) if valid is None else valid
    out = np.zeros_like(r)
    for p in range(r.shape[0]):
        x = r[p][valid[p]]
        n = x.size
        if n < 2 or x.max() == x.min():
            continue  # no group to compare with / zero variance: 0
        mean = sum(x) / n
        if kind == "grpo":
            std = (sum((v - mean) ** 2 for v in x) / (n - ddof)) ** 0.5
            a = [(v - mean) / (std + eps) for v in x]
        elif kind == "drgrpo":
            a = [v - mean for v in x]
        elif kind == "reinforce":  # no baseline: the reward itself
            a = list(x)
        else:  # loo
            a = [v - (sum(x) - v) / (n - 1) for v in x]
        out[p, valid[p]] = a
    return out


def ref_kl(logp, ref, kind, mask):
    d = np.where(mask > 0, logp - ref, 0.0)
    if kind == "k1":
        k = d
    elif kind == "k2":
        k = 0.5 * d * d
    else:
        k = np.exp(-d) + d - 1.0
    return np.where(mask > 0, k, 0.0)


def ref_policy_loss(logp, old, adv, mask, lo, hi, dual, clamp=20.0):
    lr = np.clip(np.where(mask > 0, logp - old, 0.0), -clamp, clamp)
    ratio = np.exp(lr)
    a = np.broadcast_to(adv[:, None], mask.shape)
    loss = np.maximum(-a * ratio, -a * np.clip(ratio, 1 - lo, 1 + hi))
    if dual:
        loss = np.where(a < 0, np.minimum(loss, -a * dual), loss)
    return np.where(mask > 0, loss, 0.0)


def ref_aggregate(x, mask, mode, norm, rows="active"):
    active = mask.sum(1) > 0
    if mode == "token-mean":
        return (x * mask).sum() / max(mask.sum(), 1.0)
    sums = (x * mask).sum(1)
    if mode == "seq-mean-token-mean":
        per = np.where(active, sums / np.maximum(mask.sum(1), 1.0), 0.0)
    elif mode == "seq-mean-token-sum":
        per = sums
    else:
        per = sums / norm
    denom = mask.shape[0] if rows == "all" else max(active.sum(), 1)
    return per[active].sum() / denom


# ------------------------------------------------------------------------------------------------- the tests

@pytest.mark.parametrize("kind", ["grpo", "drgrpo", "loo", "reinforce"])
@pytest.mark.parametrize("value", [0.7, 0.1, 1 / 3, -0.3, 2.0 / 7])
def test_constant_group_gives_exactly_zero_at_paper_shape(kind, value):
    # P=32, G=16, a non-representable reward: fp32 statistics gave +0.1065 for every sample (audit, issue 15)
    rewards = np.full((32, 16), value, np.float32)
    adv = np.asarray(obj.group_advantages(rewards, kind))
    assert adv.dtype == np.float32
    assert np.all(adv == 0.0), f"{kind} {value}: max |A| = {np.abs(adv).max()}"


@pytest.mark.parametrize("kind", ["grpo", "drgrpo", "loo", "reinforce"])
def test_advantages_match_float64_reference(kind):
    rng = np.random.default_rng(0)
    worst = 0.0
    for shape in [(32, 16), (3, 2), (7, 5), (1, 64)]:
        for ddof in (0, 1):
            r = rng.choice([-1.0, 0.0, 0.1, 0.7, 1 / 3, 1.0], size=shape) + rng.normal(0, 1, shape) * rng.choice(
                [0.0, 1e-7, 1e-3, 0.5], size=(shape[0], 1))  # constant, near-constant and spread groups
            r[0] = 0.7  # one exactly constant group always
            r = r.astype(np.float32)
            got = np.asarray(obj.group_advantages(r, kind, 1e-6, ddof))
            want = ref_advantages(r.astype(np.float64), kind, 1e-6, ddof)
            np.testing.assert_allclose(got, want, **TOL)
            worst = max(worst, np.abs(got - want).max())
    print(f"advantage {kind}: max abs err {worst:.2e}")


def test_advantages_with_excluded_samples_match_reference():
    rng = np.random.default_rng(1)
    r = rng.choice([-1.0, 0.0, 0.4, 0.7], size=(8, 6)).astype(np.float32)
    valid = rng.random((8, 6)) > 0.3
    valid[0] = [True, False, False, False, False, False]  # one valid sample: no baseline, 0
    r[1] = [0.7, 0.7, -1.0, 0.7, 0.7, 0.7]
    valid[1] = [True, True, False, True, True, True]  # the only different reward excluded: zero variance
    for kind in ("grpo", "drgrpo", "loo", "reinforce"):
        got = np.asarray(obj.group_advantages(r, kind, valid=valid))
        np.testing.assert_allclose(got, ref_advantages(r.astype(np.float64), kind, valid=valid), **TOL)
    assert np.all(np.asarray(obj.group_advantages(r, "grpo", valid=valid))[1] == 0.0)


def test_one_sample_per_group_is_refused_naming_the_key():
    for kind in ("grpo", "drgrpo", "loo", "reinforce"):
        with pytest.raises(ValueError, match="rl.num_samples"):
            obj.group_advantages(np.zeros((4, 1)), kind)


def _random_batch(rng, b=12, t=9):
    mask = (rng.random((b, t)) > 0.3).astype(np.float32)
    mask[0] = 0.0  # an empty row (compact-filtered or batch padding)
    mask[1, 4:] = 0.0  # right padding
    logp = rng.normal(-2, 1, (b, t))
    old = logp + rng.normal(0, 0.3, (b, t))
    old[2] = logp[2] + 30.0  # ratio e^-30, clamped to e^-20
    old[3] = logp[3] - 30.0  # ratio e^30, clamped to e^20
    old[4] = logp[4] - rng.choice([-0.5, 0.5], size=t)  # just outside the clip range
    ref = logp + rng.normal(0, 0.5, (b, t))
    logp[~(mask > 0)] = rng.choice([-1e9, 0.0, 50.0], size=int((mask == 0).sum()))  # garbage under padding
    adv = rng.normal(0, 1, b)
    truncated = rng.random(b) > 0.7
    return [x.astype(np.float32) for x in (logp, old, ref, adv)] + [mask, truncated]


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_estimators_match_reference(kind):
    logp, _, ref, _, mask, _ = _random_batch(np.random.default_rng(2))
    got = np.asarray(obj.kl_penalty(logp, ref, kind, mask))
    want = ref_kl(logp.astype(np.float64), ref.astype(np.float64), kind, mask)
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("lo,hi,dual", [(0.2, 0.2, 0.0), (0.2, 0.28, 0.0), (0.1, 0.3, 3.0)])
def test_policy_loss_matches_reference(lo, hi, dual):
    rng = np.random.default_rng(3)
    for _ in range(3):
        logp, old, _, adv, mask, _ = _random_batch(rng)
        got, _ = obj.policy_loss(logp, old, adv, mask, lo, hi, dual)
        want = ref_policy_loss(logp.astype(np.float64), old.astype(np.float64), adv.astype(np.float64), mask,
                               lo, hi, dual)
        np.testing.assert_allclose(np.asarray(got), want, **TOL)


@pytest.mark.parametrize("rows", ["active", "all"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_aggregations_match_reference(mode, rows):
    if rows == "all" and mode == "token-mean":
        with pytest.raises(ValueError, match="rl.seq_mean_rows"):
            obj.aggregate_loss(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), mode, 9.0, rows)
        return
    rng = np.random.default_rng(4)
    for _ in range(4):
        x = rng.normal(0, 3, (10, 7)).astype(np.float32)
        mask = (rng.random((10, 7)) > 0.4).astype(np.float32)
        mask[rng.integers(0, 10, 3)] = 0.0  # empty rows
        got = float(obj.aggregate_loss(x, mask, mode, 9.0, rows))
        want = ref_aggregate(x.astype(np.float64), mask, mode, 9.0, rows)
        np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("agg,rows,filt", [("token-mean", "active", False), ("seq-mean-token-mean", "active", True),
                                           ("seq-mean-token-sum-norm", "all", True)])
def test_grpo_loss_matches_reference(agg, rows, filt):
    logp, old, ref, adv, mask, truncated = _random_batch(np.random.default_rng(5))
    old[3] = logp[3] + 0.1  # keep the total finite-sized so the 1e-5 tolerance is meaningful
    cfg = loss_config(clip_eps_low=0.2, clip_eps_high=0.28, kl_coef=0.04, loss_agg=agg, loss_norm=16.0,
                             compact_filtering=filt, seq_mean_rows=rows)
    loss, metrics = obj.grpo_loss(logp, old, ref, adv, mask, cfg, truncated=truncated)
    m = mask * (~truncated)[:, None] if filt else mask
    f = lambda x: x.astype(np.float64)  # noqa: E731
    per = ref_policy_loss(f(logp), f(old), f(adv), m, 0.2, 0.28, 0.0) + 0.04 * ref_kl(f(logp), f(ref), "k3", m)
    np.testing.assert_allclose(float(loss), ref_aggregate(per, m, agg, 16.0, rows), **TOL)
    want_weight = m.shape[0] if rows == "all" else (m.sum() if agg == "token-mean" else (m.sum(1) > 0).sum())
    assert float(metrics["loss_weight"]) == want_weight


def ref_decoupled(logp, prox, behav, adv, mask, lo, hi, cap):
    """AReaL's `ppo_actor_loss_fn` with a proximal policy, token-mean, in float64, and its gradient in logp
    (written from the formula: d/dlogp of -A w r is -A w r where the unclipped term wins, else 0)."""
    on = mask > 0
    ratio = np.where(on, np.exp(logp - prox), 0.0)
    a = np.broadcast_to(adv[:, None], mask.shape)
    l1, l2 = -a * ratio, -a * np.clip(ratio, 1 - lo, 1 + hi)
    w = np.exp(prox - behav)
    keep = on & (w <= cap)  # AReaL's behav_mask: a token over the cap gets weight 0 but stays in the count
    w = np.where(keep, w, 0.0)
    per = np.maximum(l1, l2) * w
    count = max(on.sum(), 1)
    grad = np.where(on & (l1 >= l2), -a * ratio * w, 0.0) / count
    return np.where(on, per, 0.0).sum() / count, grad


def test_decoupled_loss_and_its_gradient_match_arealss_formula_on_a_stale_batch():
    """A batch two versions stale: the behaviour log-probs differ from the proximal ones by up to 2 nats, so some
    weights pass the cap of 5 and some ratios clip; the loss and d loss / d logp agree with the float64 formula."""
    import jax

    rng = np.random.default_rng(7)
    logp, _, _, adv, mask, _ = _random_batch(rng)
    prox = (logp + rng.normal(0, 0.15, logp.shape)).astype(np.float32)  # this update has moved the policy
    behav = (prox + rng.normal(0, 0.9, logp.shape)).astype(np.float32)  # the sampler's, two versions back
    cfg = loss_config(clip_eps_low=0.2, clip_eps_high=0.28, off_policy="decoupled", behav_weight_cap=5.0)
    loss_of = lambda lp: obj.grpo_loss(lp, behav, None, adv, mask, cfg, prox_logp=prox)[0]  # noqa: E731
    f = lambda x: x.astype(np.float64)  # noqa: E731
    want, want_grad = ref_decoupled(f(logp), f(prox), f(behav), f(adv), mask, 0.2, 0.28, 5.0)
    w = np.exp(f(prox) - f(behav))[mask > 0]
    assert (w > 5).any() and (w < 0.2).any()  # the cap and tiny weights are both exercised
    np.testing.assert_allclose(float(loss_of(logp)), want, **TOL)
    np.testing.assert_allclose(np.asarray(jax.grad(loss_of)(logp)), want_grad, rtol=1e-4, atol=1e-7)
