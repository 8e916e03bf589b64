"""make_optimizer against a numpy AdamW written out here, and schedules against hand-computed values."""

import math

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments.base import get_config
from swerl_jax.optim import make_optimizer, make_schedule


def _cfg(**kw):
    c = get_config().optim
    c.update(kw)
    return c


def test_schedules_by_hand():
    s = make_schedule(_cfg(learning_rate=1.0, warmup_steps=4, schedule="cosine", final_lr_ratio=0.1), num_steps=14)
    # warmup: (step + 1) / 4; cosine over 10 steps from step 4: 0.1 + 0.9 * 0.5 * (1 + cos(pi * k / 10))
    want = [0.25, 0.5, 0.75, 1.0, 1.0,
            0.1 + 0.45 * (1 + math.cos(math.pi * 0.1)), 0.1 + 0.45 * (1 + math.cos(math.pi / 2))]
    got = [float(s(i)) for i in (0, 1, 2, 3, 4, 5, 9)]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert float(s(14)) == pytest.approx(0.1) and float(s(100)) == pytest.approx(0.1)
    c = make_schedule(_cfg(learning_rate=3e-4, warmup_steps=0, schedule="constant"), num_steps=5)
    assert float(c(0)) == pytest.approx(3e-4) and float(c(1000)) == pytest.approx(3e-4)
    assert float(make_schedule(_cfg(), 5, learning_rate=2e-5)(3)) == pytest.approx(2e-5)
    # GRPO's rl.warmup_steps replaces optim.warmup_steps (which the SFT stage keeps reading)
    w = make_schedule(_cfg(learning_rate=1.0, warmup_steps=0, schedule="constant"), 50, warmup_steps=10)
    assert [float(w(i)) for i in (0, 4, 9, 10)] == pytest.approx([0.1, 0.5, 1.0, 1.0])


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="optim.schedule='linear'"):
        make_schedule(_cfg(schedule="linear"), 10)
    with pytest.raises(ValueError, match="optim.warmup_steps"):
        make_schedule(_cfg(schedule="cosine", warmup_steps=10), 10)
    with pytest.raises(ValueError, match="optim.grad_accum_steps"):
        make_optimizer(_cfg(grad_accum_steps=0), 10)
    with pytest.raises(ValueError, match="optim.b2"):
        make_optimizer(_cfg(b2=1.0), 10)


def _numpy_adamw(params, grads_seq, lr, b1, b2, eps, wd, clip, decay):
    """Reference AdamW (Loshchilov & Hutter, bias-corrected, decoupled decay) with global-norm clipping."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: 0.0 for k in p}
    v = {k: 0.0 for k in p}
    for t, g in enumerate(grads_seq, start=1):
        norm = math.sqrt(sum(float((x.astype(np.float64) ** 2).sum()) for x in g.values()))
        scale = min(1.0, clip / norm) if clip else 1.0
        for k in p:
            gk = g[k] * scale
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk * gk
            mhat, vhat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            p[k] = p[k] - lr(t - 1) * (mhat / (np.sqrt(vhat) + eps) + (wd * p[k] if decay[k] else 0.0))
    return p


PARAMS = {"w": np.array([[0.5, -1.0], [2.0, 0.1]], np.float32), "scale": np.array([1.0, 1.0], np.float32)}
GRADS = [{"w": np.array([[3.0, -4.0], [0.0, 1.0]], np.float32), "scale": np.array([0.5, -0.5], np.float32)},
         {"w": np.array([[-1.0, 0.2], [0.3, 0.0]], np.float32), "scale": np.array([0.1, 0.2], np.float32)},
         {"w": np.array([[0.0, 0.5], [-2.0, 1.0]], np.float32), "scale": np.array([-0.3, 0.0], np.float32)}]


def _run(tx, grads_seq):
    params = {k: jnp.asarray(v) for k, v in PARAMS.items()}
    state = tx.init(params)
    for g in grads_seq:
        upd, state = tx.update({k: jnp.asarray(v) for k, v in g.items()}, state, params)
        params = optax.apply_updates(params, upd)
    return params


def test_adamw_warmup_clip_decay_matches_numpy():
    cfg = _cfg(learning_rate=0.1, warmup_steps=2, schedule="cosine", b1=0.8, b2=0.9, weight_decay=0.05,
               grad_clip=1.0, eps=1e-6, final_lr_ratio=0.0)
    got = _run(make_optimizer(cfg, num_steps=4), GRADS)
    lr = lambda i: [0.05, 0.1, 0.1, 0.05][i]  # warmup .05, .1; then cosine over 2 steps: .1, .05
    want = _numpy_adamw(PARAMS, GRADS, lr, 0.8, 0.9, 1e-6, 0.05, 1.0, {"w": True, "scale": False})
    for k in PARAMS:  # fp32 vs fp64 reference
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_grad_accumulation_equals_mean_gradient_step():
    cfg = _cfg(learning_rate=0.1, grad_clip=0.0, grad_accum_steps=2, weight_decay=0.0)
    tx = make_optimizer(cfg, num_steps=10)
    params = {k: jnp.asarray(v) for k, v in PARAMS.items()}
    state = tx.init(params)
    upd, state = tx.update({k: jnp.asarray(v) for k, v in GRADS[0].items()}, state, params)
    assert all(float(jnp.abs(u).max()) == 0.0 for u in upd.values())  # first micro-step: no update
    params = optax.apply_updates(params, upd)
    upd, state = tx.update({k: jnp.asarray(v) for k, v in GRADS[1].items()}, state, params)
    got = optax.apply_updates(params, upd)
    mean = [{k: (GRADS[0][k] + GRADS[1][k]) / 2 for k in PARAMS}]
    want = _numpy_adamw(PARAMS, mean, lambda i: 0.1, 0.9, 0.999, 1e-8, 0.0, 0.0, {"w": True, "scale": False})
    for k in PARAMS:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_grad_accumulation_schedule_spans_the_run():
    """num_steps counts `update` calls (the trainers' updates): with grad_accum_steps = k the cosine runs over the
    num_steps // k real AdamW steps and reaches its floor at the last one (it stopped at 1/k of its horizon)."""
    n = 8
    for k in (1, 2, 4):
        tx = make_optimizer(_cfg(learning_rate=1.0, warmup_steps=0, schedule="cosine", final_lr_ratio=0.0,
                                 grad_clip=0.0, weight_decay=0.0, b1=0.0, b2=0.0, eps=1e-30, grad_accum_steps=k), n)
        params = {"w": jnp.zeros(())}
        state, lrs = tx.init(params), []
        for _ in range(n):
            upd, state = tx.update({"w": jnp.ones(())}, state, params)  # b1 = b2 = 0: the update is -lr * sign
            if float(upd["w"]):
                lrs.append(-float(upd["w"]))
        steps = n // k
        want = [0.5 * (1 + math.cos(math.pi * i / steps)) for i in range(steps)]
        np.testing.assert_allclose(lrs, want, rtol=1e-5, atol=1e-6, err_msg=f"grad_accum_steps={k}")


def test_skip_nonfinite_updates():
    tx = make_optimizer(_cfg(learning_rate=0.1, skip_nonfinite=2), num_steps=10)
    params = {k: jnp.asarray(v) for k, v in PARAMS.items()}
    state = tx.init(params)
    bad = {"w": jnp.full((2, 2), jnp.nan), "scale": jnp.ones(2)}
    upd, state = tx.update(bad, state, params)
    assert all(float(jnp.abs(u).max()) == 0.0 for u in upd.values()) and int(state.notfinite_count) == 1
    upd, state = tx.update({k: jnp.asarray(v) for k, v in GRADS[0].items()}, state, params)
    got = optax.apply_updates(params, upd)  # a good update after the skipped one equals a first AdamW step
    want = _numpy_adamw(PARAMS, GRADS[:1], lambda i: 0.1, 0.9, 0.999, 1e-8, 0.0, 1.0, {"w": True, "scale": False})
    for k in PARAMS:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="optim.skip_nonfinite"):
        make_optimizer(_cfg(skip_nonfinite=-1), 10)
