"""swerl_jax/model/attention.py: the Pallas splash path against XLA attention (Pallas interpret mode on CPU)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swerl_jax.model.attention import dot_product_attention
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import forward, init_params


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
