"""Llama forward vs transformers (fp32 parity on the tiny registry configs), log-probs, KV cache, remat, bf16."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import load_hf
from swerl_jax.model.llama import KVCache, Llama, forward, init_params, positions_from_mask, token_logprobs
from tests.model.hf_models import hf_logits, left_padded_batch, save_random_hf

TINY = ["tiny", "tiny-gqa-untied", "tiny-tied"]
TOL = 1e-4  # max |logit diff| fp32 vs transformers (the bound; observed ~1e-6)


@pytest.fixture(scope="module", params=TINY)
def converted(request, tmp_path_factory):
    """(config, params, HF model) of a random HF checkpoint of each tiny config, loaded through load_hf."""
    cfg = get_model_config(request.param)
    out = tmp_path_factory.mktemp(request.param)
    model = save_random_hf(cfg, out, seed=len(request.param))
    loaded_cfg, params = load_hf(out)
    assert loaded_cfg.replace(head_dim=None) == cfg.replace(head_dim=None)
    return cfg, params, model


def test_logits_match_transformers_left_padded(converted):
    cfg, params, model = converted
    tokens, mask = left_padded_batch(cfg.vocab_size)
    positions = np.asarray(positions_from_mask(jnp.asarray(mask)))
    ref = hf_logits(model, tokens, mask, positions)
    ours = np.asarray(forward(cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))
    assert ours.shape == (2, 24, cfg.vocab_size) and ours.dtype == np.float32
    diff = np.abs(ours - ref)[mask]  # padded query positions are undefined in both
    assert diff.max() <= TOL, diff.max()
    # The padded row's real tokens equal the same tokens run alone (positions restart at 0).
    alone = np.asarray(forward(cfg, params, jnp.asarray(tokens[:1, 5:])))
    np.testing.assert_allclose(ours[0, 5:], alone[0], atol=1e-5)


def test_token_logprobs_equal_log_softmax_gather(converted):
    cfg, params, _ = converted
    tokens, mask = left_padded_batch(cfg.vocab_size, t=19)
    tok, msk = jnp.asarray(tokens), jnp.asarray(mask)
    logits = np.asarray(forward(cfg, params, tok, msk), np.float64)
    logsm = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    want = np.take_along_axis(logsm[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
    entropy = -(np.exp(logsm) * logsm).sum(-1)
    # chunk_size 4 does not divide 19: exercises the padded last chunk.
    logp, ent = token_logprobs(cfg, params, tok, msk, chunk_size=4, with_entropy=True)
    np.testing.assert_allclose(np.asarray(logp)[:, :-1], want, atol=2e-5)
    np.testing.assert_allclose(np.asarray(ent), entropy, atol=2e-5)
    window = token_logprobs(cfg, params, tok, msk, chunk_size=3, start=7, length=10)
    np.testing.assert_allclose(np.asarray(window), want[:, 7:17], atol=2e-5)
    # only some positions projected (an agent row: the model's turns); padding entries (>= length) dropped
    loss_mask = np.zeros((tokens.shape[0], 10), np.float32)
    loss_mask[0, [1, 2, 3, 8]] = 1
    loss_mask[-1, [0, 9]] = 1
    from swerl_jax.batching import score_positions

    positions = score_positions(loss_mask, multiple=2)
    assert positions.shape == (tokens.shape[0], 4) and positions[-1, 2:].tolist() == [10, 10]
    picked, picked_ent = token_logprobs(cfg, params, tok, msk, chunk_size=3, start=7, length=10,
                                        positions=jnp.asarray(positions), with_entropy=True)
    np.testing.assert_allclose(np.asarray(picked), want[:, 7:17] * loss_mask, atol=2e-5)
    np.testing.assert_allclose(np.asarray(picked_ent), entropy[:, 7:17] * loss_mask, atol=2e-5)

    def masked_loss(fn_positions):
        def loss(p):
            lp = token_logprobs(cfg, p, tok, msk, start=7, length=10, positions=fn_positions)
            return -(lp * loss_mask).sum()
        return jax.grad(loss)(params)

    full, sparse = masked_loss(None), masked_loss(jnp.asarray(positions))
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(sparse)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


def test_kv_cache_decode_equals_full_forward(converted):
    cfg, params, _ = converted
    tokens, mask = left_padded_batch(cfg.vocab_size, t=16)
    full = np.asarray(forward(cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))
    model = Llama(cfg)
    positions = positions_from_mask(jnp.asarray(mask))
    max_len, prefill = 20, 10
    cache = KVCache.zeros(cfg, 2, max_len)
    kv_mask = jnp.zeros((2, max_len), bool).at[:, :prefill].set(jnp.asarray(mask[:, :prefill]))
    step = jax.jit(lambda t, p, m, c, i: model.apply({"params": params}, t, p, m, c, i))
    logits, cache = step(jnp.asarray(tokens[:, :prefill]), positions[:, :prefill], kv_mask, cache, 0)
    got = [np.asarray(logits)]
    for i in range(prefill, 16):
        kv_mask = kv_mask.at[:, i].set(True)
        logits, cache = step(jnp.asarray(tokens[:, i:i + 1]), positions[:, i:i + 1], kv_mask, cache, i)
        got.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(got, axis=1)[mask], full[mask], atol=1e-5)


def _loss_and_grads(cfg, params, tokens):
    def loss(p):
        return -token_logprobs(cfg, p, tokens, jnp.ones(tokens.shape, bool))[:, :-1].mean()

    return jax.jit(jax.value_and_grad(loss))(params)


def test_remat_full_same_loss_and_grads():
    cfg = get_model_config("tiny")
    params = init_params(cfg, jax.random.key(0))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 12)))
    # The loss is a function of every logit, so equal losses and grads cover the forward too.
    l0, g0 = _loss_and_grads(cfg, params, tokens)
    l1, g1 = _loss_and_grads(cfg.replace(remat="full"), params, tokens)
    assert abs(float(l0) - float(l1)) <= 1e-6
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(g0))


def test_bf16_compute_runs_close_to_fp32(converted):
    cfg, params, _ = converted
    tokens, mask = left_padded_batch(cfg.vocab_size)
    fp32 = np.asarray(forward(cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))
    bf16_cfg = cfg.replace(dtype="bfloat16", param_dtype="bfloat16")
    bf16_params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    out = forward(bf16_cfg, bf16_params, jnp.asarray(tokens), jnp.asarray(mask))
    assert out.dtype == jnp.float32  # logits are fp32 whatever the compute dtype
    out = np.asarray(out)
    assert np.isfinite(out[mask]).all()
    # bf16 has ~3 significant digits: logits agree loosely, the argmax mostly.
    scale = np.abs(fp32[mask]).max()
    assert np.abs(out[mask] - fp32[mask]).max() <= 0.1 * scale
    assert (out[mask].argmax(-1) == fp32[mask].argmax(-1)).mean() >= 0.8


def test_head_logits_backward_runs_in_the_compute_dtype():
    """`head_logits`: fp32 logits; its gradients equal plain autodiff's exactly in fp32, and in bf16 they are bf16
    (the fp32 cotangent cast first: no fp32 GEMM over the vocabulary) within bf16 rounding of autodiff's."""
    from swerl_jax.model.llama import head_logits

    rng = np.random.default_rng(0)
    target = jnp.asarray(rng.normal(size=(2, 5, 40)), jnp.float32)
    for dt, tol in ((jnp.float32, 0.0), (jnp.bfloat16, 1e-2)):
        h = jnp.asarray(rng.normal(size=(2, 5, 16)), dt)
        w = jnp.asarray(rng.normal(size=(16, 40)), dt)

        def ours(h, w):
            return (head_logits(h, w) * target).sum()

        def plain(h, w):
            return (jnp.einsum("...e,ev->...v", h, w, preferred_element_type=jnp.float32) * target).sum()

        assert head_logits(h, w).dtype == jnp.float32 and ours(h, w) == plain(h, w)
        for a, b in zip(jax.grad(ours, (0, 1))(h, w), jax.grad(plain, (0, 1))(h, w)):
            assert a.dtype == dt
            a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
            assert np.linalg.norm(a - b) <= tol * np.linalg.norm(b)
