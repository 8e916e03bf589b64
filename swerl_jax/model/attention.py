"""Causal self-attention kernels behind `model.attention_impl`.

- None / "xla": `jax.nn.dot_product_attention`'s XLA path: it materialises [batch, heads, T, T] scores, which
  at 16k tokens is what makes a long-context step not fit (see BENCHMARKS.md "Deviceless TPU compilation").
- "cudnn": the same call's cuDNN flash attention (Hopper GPUs) with cuDNN's own causal mask and sequence
  lengths, so the kernel skips the masked upper triangle and reads no mask. Llama's rows are [left-padded
  prompt | right-padded completion]: each row's real tokens are contiguous, so attention rolls every row left
  by its padding (RoPE positions are already in q and k; causality by slot is unchanged among real tokens),
  calls cuDNN with `is_causal` and the row's length, and rolls the output back. A row whose real tokens are
  not contiguous is not expressible that way: then (checked on device, `lax.cond`) the step takes the
  "cudnn_masked" path, which is exact for any mask.
- "cudnn_masked": cuDNN flash attention given the mask, which JAX turns into an additive [b, 1, t, s] bias:
  exact for any mask, but the kernel reads the bias and computes every query-key block, the masked half too
  (H100, Llama-3.2-1B at seq 4096: see BENCHMARKS.md "Sharding, MFU and memory planner").
- "pallas": JAX's Pallas TPU splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`), a
  flash-style kernel whose forward and backward keep O(T) memory per head. On a TPU mesh it compiles
  to the Mosaic kernel; anywhere else it runs the same kernel in Pallas interpret mode (slow; for parity
  tests on CPU).

The Pallas path handles what `Llama` asks of attention when queries and keys are the same positions
(training, the sampler's prefill): causal by position plus a per-key padding mask, which becomes splash's
segment ids (real tokens 1, padding 0: a real query never sees padding; a padded query sees only padding,
so no row is empty and its output, never used, stays finite). Anything else (decoding over a cache, where
the queries are a suffix of the keys) falls back to XLA attention, which is cheap there.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

IMPLEMENTATIONS = (None, "xla", "cudnn", "cudnn_masked", "pallas")
_SEQ_ALIGN = 128  # splash's smallest block: sequences are padded to a multiple of it
_MAX_BLOCK = 512


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float,
                          implementation: str | None) -> jax.Array:
    """Grouped-query attention: q [b, t, h, d], k / v [b, s, kv, d], mask [b, 1, t, s] -> [b, t, h, d].

    `mask` must be Llama's: causal by slot and a per-key padding mask (`kv_mask`); the Pallas path reads the
    padding mask from its last query row, which (queries == keys) sees every key.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"model.attention_impl={implementation!r}; known: {IMPLEMENTATIONS}")
    same = q.shape[1] == k.shape[1]  # training and prefill; otherwise queries are a suffix of a cache
    if implementation == "pallas" and same:
        return splash_attention(q, k, v, mask[:, 0, -1, :], scale)
    if implementation == "cudnn" and same:
        return cudnn_causal_attention(q, k, v, mask, scale)
    impl = {"pallas": None, "xla": None, "cudnn_masked": "cudnn"}.get(implementation, implementation)
    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale, implementation=impl)


def cudnn_causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float) -> jax.Array:
    """cuDNN causal flash attention for Llama's mask (causal by slot & a per-key padding mask): q [b, t, h, d],
    k / v [b, t, kv, d], mask [b, 1, t, t] -> [b, t, h, d].

    Exact for real (unpadded) queries when each row's real tokens are contiguous, which `batching` guarantees;
    otherwise it computes the masked path instead (a device-side check, so it works under jit). Padded queries
    are never read by a loss; their outputs are set to zero (cuDNN leaves rows past a sequence length alone).
    """
    kv_mask = mask[:, 0, -1, :]  # the last query sees every real key
    b, t = kv_mask.shape
    slot = jnp.arange(t, dtype=jnp.int32)
    first = jnp.argmax(kv_mask, axis=1).astype(jnp.int32)
    count = jnp.sum(kv_mask, axis=1, dtype=jnp.int32)
    contiguous = jnp.all(kv_mask == ((slot >= first[:, None]) & (slot < (first + count)[:, None])))

    def take(x: jax.Array, index: jax.Array) -> jax.Array:
        return jnp.take_along_axis(x, index[:, :, None, None], axis=1)

    def causal(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
        rolled = (slot[None, :] + first[:, None]) % t  # rolled slot i holds slot i + first
        lengths = jnp.maximum(count, 1)  # an all-padding row: finite output, never used
        out = jax.nn.dot_product_attention(take(q, rolled), take(k, rolled), take(v, rolled), scale=scale,
                                           is_causal=True, query_seq_lengths=lengths,
                                           key_value_seq_lengths=lengths, implementation="cudnn")
        out = jnp.where((slot[None, :] < count[:, None])[:, :, None, None], out, 0)
        return take(out, (slot[None, :] - first[:, None]) % t)

    def masked(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale, implementation="cudnn")

    return jax.lax.cond(contiguous, causal, masked, q, k, v, mask)


def _mesh_platform() -> tuple[jax.sharding.AbstractMesh, str]:
    mesh = jax.sharding.get_abstract_mesh()
    device = None if mesh.empty else mesh.abstract_device
    return mesh, device.platform if device is not None else jax.default_backend()


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, kv_mask: jax.Array, scale: float) -> jax.Array:
    """Causal GQA splash attention with key padding: q [b, t, h, d], k / v [b, t, kv, d], kv_mask [b, t] bool.

    Under a mesh (the trainer's `mesh_context`) the kernel runs per shard via `shard_map`: batch over the
    logical `activation_batch` axes, heads over `activation_heads` (XLA cannot partition a custom kernel;
    without this it would gather the whole batch onto every chip). Per shard, the sequence is padded to a
    multiple of 128 (padding at the end is causally invisible to real queries).
    """
    mesh, platform = _mesh_platform()
    interpret = platform != "tpu"
    if mesh.empty:
        return _splash_local(q, k, v, kv_mask, scale, interpret)
    batch_axes, head_axes = nn.logical_to_mesh_axes(("activation_batch", "activation_heads"))
    qs = PartitionSpec(batch_axes, None, head_axes, None)
    fn = jax.shard_map(functools.partial(_splash_local, scale=scale, interpret=interpret), mesh=mesh,
                       in_specs=(qs, qs, qs, PartitionSpec(batch_axes, None)), out_specs=qs, check_vma=False)
    return fn(q, k, v, kv_mask)


def _splash_local(q: jax.Array, k: jax.Array, v: jax.Array, kv_mask: jax.Array, scale: float,
                  interpret: bool) -> jax.Array:
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    b, t, h, d = q.shape
    kv = k.shape[2]
    if h % kv:
        raise ValueError(f"splash attention: {h} query heads are not a multiple of {kv} key/value heads")
    padded = -(-t // _SEQ_ALIGN) * _SEQ_ALIGN
    block = next(s for s in (_MAX_BLOCK, 256, _SEQ_ALIGN) if padded % s == 0)
    pad = padded - t
    if pad:
        q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
        kv_mask = jnp.pad(kv_mask, ((0, 0), (0, pad)))
    groups = h // kv
    sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                              block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block)
    mask = masks.MultiHeadMask([masks.CausalMask((padded, padded))] * groups)
    kernel = splash.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)
    segments = kv_mask.astype(jnp.int32)
    # [b, t, h, d] -> [b, kv, groups, t, d]: each kv head serves `groups` query heads (head n uses kv n // groups)
    qg = (q * jnp.asarray(scale, q.dtype)).reshape(b, padded, kv, groups, d).transpose(0, 2, 3, 1, 4)
    kg, vg = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [b, kv, t, d]

    def one(qh: jax.Array, kh: jax.Array, vh: jax.Array, seg: jax.Array) -> jax.Array:
        return kernel(qh, kh, vh, segment_ids=splash.SegmentIds(q=seg, kv=seg))

    per_row = jax.vmap(one, in_axes=(0, 0, 0, None))  # over kv heads
    out = jax.vmap(per_row, in_axes=(0, 0, 0, 0))(qg, kg, vg, segments)  # over the batch
    out = out.transpose(0, 3, 1, 2, 4).reshape(b, padded, h, d)
    return out[:, :t]
