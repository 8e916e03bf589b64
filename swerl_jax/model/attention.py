"""Causal self-attention kernels behind `model.attention_impl`.

- None / "xla": `jax.nn.dot_product_attention`'s XLA path: it materialises [batch, heads, T, T] scores, which
  at 16k tokens is what makes a long-context step not fit (see BENCHMARKS.md "Deviceless TPU compilation").
- "cudnn": the same call's cuDNN flash attention (H100 only).
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

IMPLEMENTATIONS = (None, "xla", "cudnn", "pallas")
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
    if implementation == "pallas" and q.shape[1] == k.shape[1]:
        return splash_attention(q, k, v, mask[:, 0, -1, :], scale)
    impl = None if implementation in ("pallas", "xla") else implementation
    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale, implementation=impl)


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
