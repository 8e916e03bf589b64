"""The fused prefix-sharing decode attention (Pallas) against the XLA path `decode.attend_shared`.

Off GPU the kernels run in Pallas interpret mode; on a GPU (`JAX_PLATFORMS=cuda pytest ...`) the same tests run
the Triton kernels, with the XLA reference at full fp32 precision. The CUDA export test lowers the kernels
through Pallas's Triton lowering on any machine, so a kernel that stops lowering for GPU fails here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import KVCache
from swerl_jax.sampler import prefix_attention
from swerl_jax.sampler.decode import attend_shared
from swerl_jax.sampler.prefix_attention import attend_shared_fused, supported


def _inputs(p, s, kv, g, d, t, n, first, dtype, seed=0, holes=False):
    """Random q / caches; prompt i's slots before first[i] are left padding (holes: also a masked middle)."""
    ks = jax.random.split(jax.random.PRNGKey(seed), 5)
    rnd = lambda k, shape: jax.random.normal(k, shape, jnp.float32).astype(dtype)  # noqa: E731
    q = rnd(ks[0], (p, s, kv, g, d))
    prefix = KVCache(rnd(ks[1], (p, kv, d, t)), rnd(ks[2], (p, kv, t, d)))
    own = KVCache(rnd(ks[3], (p * s, kv, d, n)), rnd(ks[4], (p * s, kv, n, d)))
    slot = jnp.arange(t)[None, :]
    mask = slot >= jnp.asarray(first)[:, None]
    if holes:
        mask = mask & ~((slot >= 16) & (slot < t - 8))
    return q, prefix, own, mask


def _reference(q, prefix, own, mask, step):
    """The XLA path in fp32 at full precision (XLA:GPU's default fp32 dot is TF32). bf16 inputs are compared
    through their exact fp32 copies: XLA:CPU has no bf16 x bf16 -> fp32 dot to run the bf16 path itself."""
    up = lambda x: x.astype(jnp.float32)  # noqa: E731
    with jax.default_matmul_precision("highest"):
        out = attend_shared(up(q), jax.tree.map(up, prefix), jax.tree.map(up, own), mask[:, None, None, None, :],
                             jnp.arange(own.v.shape[2]) <= step)
    return out.astype(q.dtype)


def _check(q, prefix, own, mask, steps, dtype):
    for step in steps:
        out = attend_shared_fused(q, prefix.k, prefix.v, mask, own.k, own.v, jnp.int32(step))
        ref = _reference(q, prefix, own, mask, step)
        assert out.shape == ref.shape and out.dtype == q.dtype
        out, ref = np.asarray(out, np.float32), np.asarray(ref, np.float32)
        assert np.isfinite(out).all()
        if dtype == jnp.float32:
            np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5, err_msg=f"step {step}")
        else:
            np.testing.assert_allclose(out, ref, atol=2e-2 * np.abs(ref).max(), rtol=2e-2, err_msg=f"step {step}")
        print(f"{jnp.dtype(dtype).name} step {step}: max |fused - xla| {np.abs(out - ref).max():.2e}")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_left_padded_prefix_splits_and_steps(dtype):
    """3 prompts x 3 samples x 4 groups (M = 12, padded to 16), T = 256 in 4 splits of 64: prompt 0 has only its
    last 56 slots (3 splits wholly padding, skipped), prompt 2 only its last one; own steps 0, N - 1 and
    mid-block. Then a mask with a hole (slots 16..247 masked: two whole splits neither skipped nor visible): such
    a split's log-sum-exp is ~NEG, so it weighs nothing in the merge (and makes no NaN)."""
    p, s, kv, g, d, t, n = 3, 3, 2, 4, 16, 256, 128
    assert prefix_attention.prefix_splits(p * kv, t, min(prefix_attention.BLOCK, t)) == 4
    q, prefix, own, mask = _inputs(p, s, kv, g, d, t, n, first=[200, 0, t - 1], dtype=dtype)
    _check(q, prefix, own, mask, [0, n - 1, 70], dtype)
    q, prefix, own, mask = _inputs(p, s, kv, g, d, t, n, first=[0, 4, 0], dtype=dtype, seed=1, holes=True)
    _check(q, prefix, own, mask, [9], dtype)


def test_llama_group_shape_head_dim_64():
    """16 samples x 4 groups (M = 64, no padding), head_dim 64, one split, N = 16 (one own block)."""
    q, prefix, own, mask = _inputs(1, 16, 2, 4, 64, 64, 16, first=[5], dtype=jnp.float32, seed=2)
    _check(q, prefix, own, mask, [0, 15], jnp.float32)


def test_supported_shapes():
    assert supported((4, 16, 8, 4, 64), 64, 1024, 256)
    assert supported((2, 3, 2, 3, 16), 16, 16, 16)
    assert not supported((4, 16, 8, 4, 64), 64, 1000, 256)  # T not a power of two
    assert not supported((4, 16, 8, 4, 64), 64, 1024, 8)  # N < 16
    assert not supported((4, 16, 8, 4, 96), 96, 1024, 256)  # head_dim not a power of two
    assert not supported((4, 64, 8, 4, 64), 64, 1024, 256)  # 256 query rows per prompt: past MAX_ROWS
    with pytest.raises(ValueError, match="supported"):
        q, prefix, own, mask = _inputs(1, 2, 1, 2, 16, 24, 16, first=[0], dtype=jnp.float32)
        attend_shared_fused(q, prefix.k, prefix.v, mask, own.k, own.v, 0)


@pytest.mark.parametrize("d, t", [(64, 1024), (128, 2048)])
def test_exports_for_cuda(monkeypatch, d, t):
    """Both kernels lower through Pallas's Triton lowering for CUDA (no GPU needed), at the decode shapes of
    Llama-3.2-1B (head_dim 64) and 8B models (128): 16 prompts x 16 samples, 256 new slots, bf16. Each Triton
    module must also pass the MLIR verifier (the export itself only serialises it)."""
    try:
        from jax._src.pallas.triton import pallas_call_registration as registration
    except ImportError:
        registration = None
    verified = []
    if registration is not None and hasattr(registration, "lowering"):
        lower = registration.lowering.lower_jaxpr_to_triton_module

        def lower_and_verify(*args, **kwargs):
            result = lower(*args, **kwargs)
            verified.append(result.module.operation.verify())
            return result

        monkeypatch.setattr(registration.lowering, "lower_jaxpr_to_triton_module", lower_and_verify)
    p, s, kv, g, n, dt = 16, 16, 8, 4, 256, jnp.bfloat16
    sds = jax.ShapeDtypeStruct
    args = (sds((p, s, kv, g, d), dt), sds((p, kv, d, t), dt), sds((p, kv, t, d), dt), sds((p, t), jnp.bool_),
            sds((p * s, kv, d, n), dt), sds((p * s, kv, n, d), dt), sds((), jnp.int32))
    fn = jax.jit(lambda *a: attend_shared_fused(*a, interpret=False))
    # Cross-lowering for CUDA needs no GPU: the pinned jaxlib lowers Pallas to Triton on any machine.
    exported = jax.export.export(fn, platforms=["cuda"], disabled_checks=[
        jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(*args)
    assert exported.mlir_module().count("__gpu$xla.gpu.triton") == 2
    print(f"Triton modules verified: {verified}")
    assert verified in ([], [True, True])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(config, params): a random HF model of tiny-gqa-untied (3 layers, head_dim 16, 3 groups), read with
    load_hf."""
    from swerl_jax.model.convert import load_hf
    from tests.model.hf_models import save_random_hf
    out = tmp_path_factory.mktemp("tiny_hf")
    save_random_hf(get_model_config("tiny-gqa-untied"), out, seed=3)
    return load_hf(out)


def test_engine_pallas_kernel_equals_xla(tiny, monkeypatch):
    """The engine with the fused kernels (left-padded prompts, 3 samples each) draws the XLA path's greedy
    tokens, with log-probs within 1e-5."""
    from swerl_jax.sampler.engine import SamplingEngine, SamplingParams
    config, params = tiny
    traced = []
    fused_fn = prefix_attention.attend_shared_fused
    monkeypatch.setattr(prefix_attention, "attend_shared_fused", lambda *a, **k: traced.append(1) or fused_fn(*a, **k))
    prompts = [[11, 12, 13, 14, 15], [300, 7, 9], [42] * 12]
    kw = dict(max_batch=16, max_prompt_len=32, max_new_tokens=16)
    fused = SamplingEngine(config, params, prefix_kernel="pallas", **kw)
    xla = SamplingEngine(config, params, prefix_kernel="xla", **kw)
    assert fused.prefix_kernel == "pallas" and xla.prefix_kernel == "xla"
    sp = SamplingParams(temperature=0.0, max_new_tokens=16)
    with jax.default_matmul_precision("highest"):  # on a GPU, XLA's fp32 dots would otherwise be TF32
        a = fused.generate(prompts, sp, num_samples=3, seed=3)
        b = xla.generate(prompts, sp, num_samples=3, seed=3)
    assert len(traced) == config.num_layers  # one trace of the decode step, every layer on the fused path
    assert [[c.tokens.tolist() for c in g] for g in a] == [[c.tokens.tolist() for c in g] for g in b]
    worst = max(float(np.abs(x.logprobs - y.logprobs).max()) for ga, gb in zip(a, b) for x, y in zip(ga, gb))
    assert worst <= 1e-5, worst


def test_unknown_prefix_kernel_is_refused():
    from swerl_jax.sampler.engine import SamplingEngine
    with pytest.raises(ValueError, match="prefix_kernel='triton'.*'auto', 'xla', 'pallas'"):
        SamplingEngine(get_model_config("tiny"), {}, prefix_kernel="triton")
