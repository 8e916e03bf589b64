"""rl.mismatch_correction (off | tis | mis): hand-computed weights, the whole loss against a float64 numpy reference,
and a sampler in bfloat16 against a float32 trainer on a tiny Llama (the correction acts and is logged)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.base import get_config
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params, token_logprobs
from swerl_jax.rl import objectives as obj
from swerl_jax.rl.correction import mismatch_weight
from swerl_jax.rl.trainer import make_rl_loss
from tests.rl.loss_configs import loss_config

TOL = dict(rtol=1e-5, atol=1e-6)


def test_weights_by_hand():
    """w = e^(trainer - sampler) = 0.5, 1.5, 3 (and padding, which holds garbage): tis truncates 3 to the cap 2,
    mis drops it; the ratio's mean/max and the fraction capped / masked are over the real tokens only."""
    trainer = np.log(np.array([[0.5, 1.5, 3.0, 1.0]], np.float32))
    sampler = np.zeros((1, 4), np.float32)
    sampler[0, 3] = -50.0  # padding: e^50 would dominate the maximum if it counted
    mask = np.array([[1, 1, 1, 0]], np.float32)
    w, m = mismatch_weight(trainer, sampler, mask, "tis", 2.0)
    np.testing.assert_allclose(np.asarray(w), [[0.5, 1.5, 2.0, 0.0]], **TOL)
    np.testing.assert_allclose([m["mismatch_ratio_mean"], m["mismatch_ratio_max"], m["mismatch_capped_frac"]],
                               [5.0 / 3, 3.0, 1.0 / 3], **TOL)
    w, m = mismatch_weight(trainer, sampler, mask, "mis", 2.0)
    np.testing.assert_allclose(np.asarray(w), [[0.5, 1.5, 0.0, 0.0]], **TOL)
    np.testing.assert_allclose(float(m["mismatch_masked_frac"]), 1.0 / 3, **TOL)


def test_tis_loss_by_hand():
    """Two tokens, A = 1, plain ratio 1 (old = logp): per-token loss -A r = -1, times min(w, 2) = 1.5 and 2 (w =
    1.5, 4): token-mean -(1.5 + 2) / 2 = -1.75; mis keeps 1.5 and drops the 4: -(1.5 + 0) / 2 = -0.75."""
    logp = np.log(np.array([[0.3, 0.2]], np.float32))
    sampler = logp - np.log(np.array([[1.5, 4.0]], np.float32))
    adv, mask = np.ones(1, np.float32), np.ones((1, 2), np.float32)
    for mode, want in (("tis", -1.75), ("mis", -0.75)):
        cfg = loss_config(mismatch_correction=mode, mismatch_cap=2.0)
        loss, _ = obj.grpo_loss(logp, logp, None, adv, mask, cfg, prox_logp=logp, sampler_logp=sampler)
        np.testing.assert_allclose(float(loss), want, **TOL)
        # old_logp = the sampler's (rl.old_logprobs="sampler", the default): the ratio is still against the
        # trainer's own log-probs. Against the sampler's it was w again (1.5, 4), clipped to 1.2 for A > 0 and then
        # weighted: -(1.2 * 1.5 + 1.2 * 2) / 2 = -2.1 for tis, the mismatch counted twice.
        loss, _ = obj.grpo_loss(logp, sampler, None, adv, mask, cfg, prox_logp=logp, sampler_logp=sampler)
        np.testing.assert_allclose(float(loss), want, **TOL)
        # and for A < 0 the clip no longer zeroes the gradient of a token whose w is over 1 + eps: d loss / d logp
        # is -A r min(w, cap) / 2 per token at r = 1 (tis: 1.5 / 2 and 2 / 2)
        if mode == "tis":
            grad = jax.grad(lambda lp, c=cfg: obj.grpo_loss(lp, sampler, None, -adv, mask, c, prox_logp=logp,
                                                            sampler_logp=sampler)[0])(logp)
            np.testing.assert_allclose(np.asarray(grad), [[0.75, 1.0]], **TOL)


def ref_loss(logp, old, prox, sampler, adv, mask, lo, hi, off_policy, mode, cap):
    """Float64: the clipped surrogate against prox (the trainer's log-probs before the update, under plain and
    decoupled: `old` is not read), times the correction weight of w = exp(prox - sampler) (tis min(w, cap), mis w
    [w <= cap]), token mean over the mask."""
    del old, off_policy
    on = mask > 0
    base = prox
    ratio = np.exp(np.where(on, logp - base, 0.0))
    a = np.broadcast_to(adv[:, None], mask.shape)
    per = np.maximum(-a * ratio, -a * np.clip(ratio, 1 - lo, 1 + hi))
    w = np.exp(np.where(on, prox - sampler, 0.0))
    per = per * (np.minimum(w, cap) if mode == "tis" else np.where(w > cap, 0.0, w))
    return np.where(on, per, 0.0).sum() / max(on.sum(), 1)


@pytest.mark.parametrize("off_policy", ["plain", "decoupled"])
@pytest.mark.parametrize("mode", ["tis", "mis"])
def test_loss_and_gradient_match_float64_reference(mode, off_policy):
    rng = np.random.default_rng(3)
    b, t = 10, 7
    logp = rng.normal(-2, 0.5, (b, t)).astype(np.float32)
    prox = (logp + rng.normal(0, 0.1, (b, t))).astype(np.float32)
    sampler = (prox + rng.normal(0, 0.5, (b, t))).astype(np.float32)
    old = sampler if off_policy == "decoupled" else (logp + rng.normal(0, 0.2, (b, t))).astype(np.float32)
    adv = rng.normal(size=b).astype(np.float32)
    mask = (np.arange(t) < rng.integers(0, t + 1, b)[:, None]).astype(np.float32)
    cfg = loss_config(clip_eps_high=0.28, off_policy=off_policy, behav_weight_cap=5.0, mismatch_correction=mode,
                      mismatch_cap=1.5)
    loss_of = lambda lp: obj.grpo_loss(lp, old, None, adv, mask, cfg, prox_logp=prox, sampler_logp=sampler)  # noqa: E731
    f = lambda x: np.asarray(x, np.float64)  # noqa: E731
    ref = lambda lp: ref_loss(lp, f(old), f(prox), f(sampler), f(adv), mask, 0.2, 0.28, off_policy, mode, 1.5)  # noqa: E731
    w = np.exp(f(prox) - f(sampler))[mask > 0]
    assert (w > 1.5).any() and (w < 1.5).any()  # the cap acts on some tokens and not on others
    loss, metrics = loss_of(logp)
    np.testing.assert_allclose(float(loss), ref(f(logp)), **TOL)
    frac = "mismatch_capped_frac" if mode == "tis" else "mismatch_masked_frac"
    np.testing.assert_allclose(float(metrics[frac]), (w > 1.5).mean(), **TOL)
    np.testing.assert_allclose(float(metrics["mismatch_ratio_max"]), w.max(), rtol=1e-5)
    # the weight is a constant: the gradient in logp is the weighted surrogate's (central differences, float64)
    grad = np.asarray(jax.grad(lambda lp: loss_of(lp)[0])(logp))
    eps, i, j = 1e-6, *np.argwhere(mask > 0)[0]
    bumped = [f(logp).copy() for _ in range(2)]
    bumped[0][i, j] += eps
    bumped[1][i, j] -= eps
    np.testing.assert_allclose(grad[i, j], (ref(bumped[0]) - ref(bumped[1])) / (2 * eps), rtol=1e-3, atol=1e-6)


def test_off_is_the_identity_and_bad_settings_are_refused():
    rng = np.random.default_rng(0)
    logp, old, sampler = (rng.normal(-2, 0.5, (4, 5)).astype(np.float32) for _ in range(3))
    adv, mask = rng.normal(size=4).astype(np.float32), np.ones((4, 5), np.float32)
    base, _ = obj.grpo_loss(logp, old, None, adv, mask, loss_config())
    off, m = obj.grpo_loss(logp, old, None, adv, mask, loss_config(mismatch_correction="off", mismatch_cap=0.5),
                           prox_logp=logp, sampler_logp=sampler)
    assert float(off) == float(base) and not any(k.startswith("mismatch_") for k in m)
    with pytest.raises(ValueError, match="rl.mismatch_correction must be one of"):
        loss_config(mismatch_correction="trunc").validate()
    with pytest.raises(ValueError, match="rl.mismatch_cap must be > 1"):
        loss_config(mismatch_correction="tis", mismatch_cap=1.0).validate()
    with pytest.raises(ValueError, match="needs the trainer's"):
        obj.grpo_loss(logp, old, None, adv, mask, loss_config(mismatch_correction="mis", mismatch_cap=2.0))
    config = get_config()
    assert obj.GRPOLossConfig.from_config(config).mismatch_correction == "off"  # the default: today's loss
    config.rl.mismatch_correction = "tis"
    assert obj.GRPOLossConfig.from_config(config).mismatch_cap == 2.0


MODEL = get_model_config("tiny", num_heads=4, num_kv_heads=2, hidden_size=32, intermediate_size=64,
                         vocab_size=128, num_layers=2)


@pytest.mark.parametrize("mode", ["tis", "mis"])
def test_bfloat16_sampler_against_float32_trainer(mode):
    """The sampler's behaviour log-probs come from the same weights in bfloat16, the trainer's in float32: the
    ratio departs from 1 by bf16 rounding, the correction caps (tis) or masks (mis) the tokens over a tight cap,
    the loss moves off the uncorrected one, and the step logs the ratio and the fraction."""
    b, prompt, comp = 6, 5, 8
    params = jax.device_get(jax.jit(init_params, static_argnums=0)(MODEL, jax.random.key(0)))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, MODEL.vocab_size, (b, prompt + comp), dtype=np.int32)
    attn = np.ones((b, prompt + comp), bool)
    score = jax.jit(token_logprobs, static_argnums=0, static_argnames=("temperature", "start", "length"))
    kw = dict(temperature=1.0, start=prompt - 1, length=comp)
    trainer = np.asarray(score(MODEL, params, tokens, attn, **kw))
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    sampler = np.asarray(score(MODEL, bf16, tokens, attn, **kw), np.float32)
    mask = np.ones((b, comp), np.float32)
    w = np.exp(trainer.astype(np.float64) - sampler)
    assert np.abs(w - 1).max() > 1e-4  # the dtypes disagree (a near-uniform fresh policy: by little)
    up = np.sort(w[w > 1])  # the cap: in the widest gap between the middle half of the ratios over 1, so float32
    lo = up.size // 4  # rounding cannot move a token across it
    k = lo + int(np.argmax(np.diff(up[lo:up.size - lo])))
    cap = float((up[k] + up[k + 1]) / 2)
    batch = {"tokens": tokens, "attention_mask": attn, "loss_mask": mask, "old_logp": sampler,
             "sampler_logp": sampler, "prox_logp": trainer, "advantages": rng.normal(size=b).astype(np.float32),
             "truncated": np.zeros(b, bool)}
    off_cfg = loss_config()
    on_cfg = loss_config(mismatch_correction=mode, mismatch_cap=cap)
    off_loss, off_m = jax.jit(make_rl_loss(MODEL, off_cfg, prompt, comp, 1.0))(params, batch)
    on_loss, on_m = jax.jit(make_rl_loss(MODEL, on_cfg, prompt, comp, 1.0))(params, batch)
    frac = "mismatch_capped_frac" if mode == "tis" else "mismatch_masked_frac"
    np.testing.assert_allclose(float(on_m[frac]), (w > cap).mean(), rtol=1e-5)
    assert 0 < float(on_m[frac]) < 1
    np.testing.assert_allclose(float(on_m["mismatch_ratio_max"]), w.max(), rtol=1e-5)
    np.testing.assert_allclose(float(on_m["mismatch_ratio_mean"]), w.mean(), rtol=1e-5)
    assert float(on_loss) != float(off_loss) and "mismatch_ratio_max" not in off_m
    want = ref_loss(trainer.astype(np.float64), sampler, trainer, sampler, batch["advantages"].astype(np.float64),
                    mask, 0.2, 0.2, "plain", mode, cap)
    np.testing.assert_allclose(float(on_loss), want, rtol=1e-4, atol=1e-6)
