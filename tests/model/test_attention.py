"""swerl_jax/model/attention.py: the Pallas splash path against XLA attention (Pallas interpret mode on CPU)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swerl_jax.model.attention import dot_product_attention
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import forward, init_params
from tests.conftest import requires_gpu


def _inputs(b: int = 2, t: int = 40, h: int = 4, kv: int = 2, d: int = 16, pad: int = 13):
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((b, t, h, d), (b, t, kv, d), (b, t, kv, d)))
    kv_mask = np.ones((b, t), bool)
    kv_mask[1, :pad] = False  # row 1 left-padded, as the trainers and the sampler's prefill lay prompts out
    mask = jnp.asarray(np.tril(np.ones((t, t), bool))[None, None] & kv_mask[:, None, None, :])
    return q, k, v, mask, kv_mask


def test_splash_matches_xla_attention_forward_and_backward():
    """Causal GQA with left padding: outputs and gradients at real positions equal XLA attention's."""
    q, k, v, mask, real = _inputs()
    scale = q.shape[-1] ** -0.5
    ref = dot_product_attention(q, k, v, mask, scale, None)
    out = dot_product_attention(q, k, v, mask, scale, "pallas")
    assert np.isfinite(np.asarray(out)).all()  # padded queries see only padding: no empty softmax row
    np.testing.assert_allclose(np.asarray(out)[real], np.asarray(ref)[real], atol=2e-5)

    def loss(q, k, v, impl):
        return (dot_product_attention(q, k, v, mask, scale, impl) * real[:, :, None, None]).sum()

    grads_ref = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, None)
    grads = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, "pallas")
    for g, r in zip(grads, grads_ref):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=2e-5)


def test_llama_with_pallas_attention_matches_xla_logits():
    """The model's call site: a left-padded batch through Llama gives XLA attention's logits."""
    config = get_model_config("tiny")
    params = init_params(config, jax.random.key(0))
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, config.vocab_size, (2, 24)), jnp.int32)
    mask = jnp.asarray(np.arange(24)[None, :] >= np.array([[0], [7]]))
    ref = forward(config, params, tokens, mask)
    out = forward(config.replace(attention_impl="pallas"), params, tokens, mask)
    real = np.asarray(mask)
    np.testing.assert_allclose(np.asarray(out)[real], np.asarray(ref)[real], atol=1e-4)


def test_unknown_attention_impl_is_named():
    q, k, v, mask, _ = _inputs(t=8, pad=0)
    with pytest.raises(ValueError, match="model.attention_impl='flash'"):
        dot_product_attention(q, k, v, mask, 1.0, "flash")


def _cudnn_as_xla(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the "cudnn" path's own logic (roll, causal + lengths, roll back, contiguity check) on CPU: the cuDNN
    call becomes XLA's, which takes the same `is_causal` and sequence-length arguments."""
    real = jax.nn.dot_product_attention

    def xla(*args, implementation=None, **kwargs):
        return real(*args, implementation=None, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", xla)


@pytest.mark.parametrize("layout", ["left", "both", "holes", "empty_row"])
def test_cudnn_causal_path_matches_masked_attention(monkeypatch: pytest.MonkeyPatch, layout: str):
    """The causal cuDNN path (rows rolled to right padding, `is_causal` + lengths) equals masked attention at real
    queries, forward and backward, for the trainers' [left pad | prompt | completion | right pad] rows; rows with
    holes take the masked path (same numbers); an all-padding row stays finite."""
    _cudnn_as_xla(monkeypatch)
    q, k, v, _, _ = _inputs()
    t = q.shape[1]
    kv_mask = np.ones((2, t), bool)
    kv_mask[1, :13] = False
    if layout == "both":
        kv_mask[0, 30:] = False
        kv_mask[1, 35:] = False
    elif layout == "holes":
        kv_mask[0, 5:9] = False
    elif layout == "empty_row":
        kv_mask[0] = False
    mask = jnp.asarray(np.tril(np.ones((t, t), bool))[None, None] & kv_mask[:, None, None, :])
    real = kv_mask[:, :, None, None]
    scale = q.shape[-1] ** -0.5

    def loss(q, k, v, impl):
        return (dot_product_attention(q, k, v, mask, scale, impl) * real).sum()

    out = np.asarray(dot_product_attention(q, k, v, mask, scale, "cudnn"))
    ref = np.asarray(dot_product_attention(q, k, v, mask, scale, None))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out * real, ref * real, atol=2e-5)
    grads = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, "cudnn")
    grads_ref = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, None)
    for g, r in zip(grads, grads_ref):
        assert np.isfinite(np.asarray(g)).all()
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=2e-5)


@requires_gpu
@pytest.mark.parametrize("impl", ["cudnn", "cudnn_masked"])
def test_cudnn_kernels_match_xla_on_a_gpu(impl: str):
    """On a GPU: both cuDNN paths, forward and backward, equal XLA attention at real queries for bf16 inputs with
    the trainers' padding (left-padded prompt, right-padded completion) and a row with a hole (the masked
    fallback). Tolerance: bf16 operands, fp32 accumulation (~1e-2 relative)."""
    b, t, h, kv, d = 3, 256, 8, 2, 64
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=s), jnp.bfloat16) for s in ((b, t, h, d), (b, t, kv, d), (b, t, kv, d)))
    kv_mask = np.ones((b, t), bool)
    kv_mask[1, :40] = False
    kv_mask[1, 200:] = False
    kv_mask[2, 60:70] = False
    mask = jnp.asarray(np.tril(np.ones((t, t), bool))[None, None] & kv_mask[:, None, None, :])
    real = kv_mask[:, :, None, None]
    scale = d ** -0.5

    def loss(q, k, v, impl):
        out = dot_product_attention(q, k, v, mask, scale, impl).astype(jnp.float32)
        return (out * real * jnp.arange(d, dtype=jnp.float32) / d).sum()

    out = np.asarray(dot_product_attention(q, k, v, mask, scale, impl), np.float32)
    ref = np.asarray(dot_product_attention(*(x.astype(jnp.float32) for x in (q, k, v)), mask, scale, None))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out * real, ref * real, atol=2e-2, rtol=2e-2)
    grads = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, impl)
    refs = jax.grad(loss, argnums=(0, 1, 2))(*(x.astype(jnp.float32) for x in (q, k, v)), None)
    for g, r in zip(grads, refs):
        g, r = np.asarray(g, np.float32), np.asarray(r)
        assert np.isfinite(g).all()
        assert np.linalg.norm(g - r) <= 2e-2 * np.linalg.norm(r)
