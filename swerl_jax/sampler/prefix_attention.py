"""Fused prefix-sharing ("cascade") decode attention for GRPO groups, in Pallas for GPU (Triton).

Contract: `attend_shared_fused` computes exactly what `decode.attend_shared` computes (one softmax over each
row's prompt slots and its own generated slots), from the same layouts:
  q [prompts, samples, kv, groups, d] (row r = prompt r // samples, sample r % samples; query head n uses kv
  head n // groups), prefix k [prompts, kv, d, T] (keys transposed) / v [prompts, kv, T, d], prefix_mask
  [prompts, T] (False = left padding), own k [rows, kv, d, N] / v [rows, kv, N, d] with slots 0..step written,
  -> out [rows, kv, groups, d] in q's dtype; equal up to float summation order.
Two kernels write normalised partial outputs (fp32) and their log-sum-exp; XLA merges them:
  * prefix kernel, grid (prompts, kv, splits): all samples x groups query rows of a prompt are one [M, d] block,
    so each prompt's K/V is read from HBM once per group instead of once per sample; `splits` (flash-decoding
    split-K) adds programs when prompts x kv alone would leave SMs idle.
  * own kernel, grid (rows, kv): each row's generated slots, with a dynamic trip count cdiv(step + 1, bn) so
    slots not yet written are never read (half the bytes of a full sweep, on average over a generation).
On non-GPU backends the kernels run in Pallas interpret mode (parity tests); `supported` says which shapes the
Triton kernels take, and callers fall back to the XLA path for the others.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

NEG = -0.7 * float(jnp.finfo(jnp.float32).max)  # masked score, as decode's XLA path (finite: no inf - inf NaNs)
MIN_ROWS = 16  # Triton's dot needs every operand dim >= 16: q blocks are padded with zero rows up to this
MAX_ROWS = 128  # [M, d] fp32 accumulator + [M, block] scores must stay in registers (no spills):
MAX_TILE = 128 * 128  # M <= MAX_ROWS and M x d <= MAX_TILE (64 fp32 per thread at 8 warps)
TARGET_PROGRAMS = 256  # ~2 programs per SM on H100/H200 (132 SMs): split the prefix until there are this many
BLOCK = 64  # slots per loop iteration in both kernels


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _padded_rows(m: int) -> int:
    """Rows of a q block: m rounded up to a power of two (Triton blocks) and to >= MIN_ROWS (dot)."""
    return max(MIN_ROWS, pl.next_power_of_2(m))


def supported(q_shape: tuple[int, ...], d: int, T: int, N: int) -> bool:
    """Whether the Triton kernels take these shapes: q_shape [prompts, samples, kv, groups, d], head_dim `d`,
    prefix slots `T` and own slots `N`. Block dims must be powers of two, dot dims >= 16, and the padded query
    block (samples x groups rows) small enough to keep its accumulator in registers."""
    if len(q_shape) != 5 or q_shape[-1] != d:
        return False
    _, samples, _, groups, _ = q_shape
    rows = _padded_rows(samples * groups)  # >= the own kernel's padded groups
    return (_pow2(d) and 16 <= d <= 256 and _pow2(T) and T >= 16 and _pow2(N) and N >= 16
            and rows <= MAX_ROWS and rows * d <= MAX_TILE)


def prefix_splits(programs: int, T: int, bt: int) -> int:
    """Split-K factor for the prefix: the fewest powers of two giving >= TARGET_PROGRAMS programs, each split
    keeping at least one block of `bt` slots (more splits only add fp32 partials to write and merge)."""
    s = 1
    while programs * s < TARGET_PROGRAMS and T // (2 * s) >= bt:
        s *= 2
    return s


def _online_softmax_block(q, k, v, bias, carry, scale: float, upcast: bool):
    """One block of flash attention: scores q [M, d] @ k [d, b] (fp32) + bias [b] (0 or NEG), then the running
    max / sum / unnormalised output updated (FlashAttention-2). `upcast` (interpret mode) multiplies fp32 copies
    of the operands and sums: XLA:CPU has no bf16 x bf16 -> fp32 dot (and folds a convert into the dot), while
    bf16 products are exact in fp32."""
    m_prev, l_prev, acc = carry
    f32 = jnp.float32
    # fp32 inputs: IEEE products (Triton's default for DEFAULT precision is TF32, ~1e-3 off the XLA path)
    prec = jax.lax.Precision.HIGHEST if q.dtype == f32 else None

    def dot(a, b):
        if upcast:
            return jnp.sum(a.astype(f32)[:, :, None] * b.astype(f32)[None], axis=1)
        return jnp.dot(a, b, preferred_element_type=f32, precision=prec)

    s = dot(q, k) * scale + bias[None, :]
    m_next = jnp.maximum(m_prev, jnp.max(s, axis=1))
    alpha = jnp.exp(m_prev - m_next)
    p = jnp.exp(s - m_next[:, None])
    l_next = alpha * l_prev + jnp.sum(p, axis=1)
    acc = alpha[:, None] * acc + dot(p.astype(v.dtype), v)
    return m_next, l_next, acc


def _init(rows: int, d: int):
    return (jnp.full((rows,), NEG, jnp.float32), jnp.zeros((rows,), jnp.float32),
            jnp.zeros((rows, d), jnp.float32))


def _finish(carry, o_ref, lse_ref) -> None:
    """Write the normalised partial and its log-sum-exp. A partial that saw no block (sum == 0) writes o = 0 and
    lse = NEG, so the merge gives it weight exp(NEG - max) = 0 instead of 0 / 0."""
    m, total, acc = carry
    seen = total > 0
    safe = jnp.where(seen, total, 1.0)
    o_ref[...] = acc / safe[:, None]
    lse_ref[...] = jnp.where(seen, m + jnp.log(safe), NEG)


def _prefix_kernel(first_ref, q_ref, k_ref, v_ref, bias_ref, o_ref, lse_ref, *, bt: int, scale: float,
                   upcast: bool):
    """One (prompt, kv head, split): q [M, d], k [d, Ts], v [Ts, d], bias [Ts]; first = the prompt's first
    visible slot. Blocks wholly before it (left padding) are skipped: the loop starts at the block holding it."""
    split_len = v_ref.shape[0]
    start = pl.program_id(2) * split_len
    lo = jnp.maximum(first_ref[()] - start, 0) // bt
    q = q_ref[...]

    def body(j, carry):
        sl = pl.ds(pl.multiple_of(j * bt, bt), bt)
        return _online_softmax_block(q, k_ref[:, sl], v_ref[sl, :], bias_ref[sl], carry, scale, upcast)

    carry = jax.lax.fori_loop(lo, split_len // bt, body, _init(q.shape[0], q.shape[1]))
    _finish(carry, o_ref, lse_ref)


def _own_kernel(step_ref, q_ref, k_ref, v_ref, o_ref, lse_ref, *, bn: int, scale: float, upcast: bool):
    """One (row, kv head): q [Gp, d], k [d, N], v [N, d]; only slots 0..step are read (dynamic trip count),
    slots past `step` in the last block are masked."""
    step = step_ref[()]
    q = q_ref[...]
    idx = jnp.arange(bn, dtype=jnp.int32)

    def body(j, carry):
        sl = pl.ds(pl.multiple_of(j * bn, bn), bn)
        bias = jnp.where(j * bn + idx <= step, 0.0, NEG).astype(jnp.float32)
        return _online_softmax_block(q, k_ref[:, sl], v_ref[sl, :], bias, carry, scale, upcast)

    blocks = jnp.minimum(pl.cdiv(step + 1, bn), v_ref.shape[0] // bn)  # a step past the cache reads no further
    carry = jax.lax.fori_loop(0, blocks, body, _init(q.shape[0], q.shape[1]))
    _finish(carry, o_ref, lse_ref)


def _warps(rows: int, d: int) -> int:
    return 4 if rows * d <= 64 * 128 else 8


def _pad_rows(x: jax.Array, rows: int) -> jax.Array:
    """Zero rows appended to axis -2 (zero queries: finite scores, sliced off after the kernel)."""
    return jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, rows - x.shape[-2]), (0, 0)])


@functools.partial(jax.jit, static_argnames=("interpret",))
def _fused(q, prefix_k, prefix_v, prefix_mask, own_k, own_v, step, interpret: bool):
    p, s, kv, g, d = q.shape
    t, n, rows = prefix_v.shape[2], own_v.shape[2], p * s
    dt, f32, scale = q.dtype, jnp.float32, d ** -0.5
    m, mp, gp = s * g, _padded_rows(s * g), _padded_rows(g)
    bt, bn = min(BLOCK, t), min(BLOCK, n)
    splits = prefix_splits(p * kv, t, bt)
    ts = t // splits
    params = functools.partial(plgpu.CompilerParams, num_stages=2)

    # Prefix: q [prompts, kv, samples x groups (padded), d]; the mask as an fp32 additive bias.
    qa = _pad_rows(q.transpose(0, 2, 1, 3, 4).reshape(p, kv, m, d), mp)
    bias = jnp.where(prefix_mask, 0.0, NEG).astype(f32)
    first = jnp.argmax(prefix_mask, axis=1).astype(jnp.int32)  # all-False -> 0: nothing skipped, bias masks it
    o_a, lse_a = pl.pallas_call(
        functools.partial(_prefix_kernel, bt=bt, scale=scale, upcast=interpret),
        grid=(p, kv, splits),
        in_specs=[pl.BlockSpec((None,), lambda i, h, j: (i,)),
                  pl.BlockSpec((None, None, mp, d), lambda i, h, j: (i, h, 0, 0)),
                  pl.BlockSpec((None, None, d, ts), lambda i, h, j: (i, h, 0, j)),
                  pl.BlockSpec((None, None, ts, d), lambda i, h, j: (i, h, j, 0)),
                  pl.BlockSpec((None, ts), lambda i, h, j: (i, j))],
        out_specs=[pl.BlockSpec((None, None, None, mp, d), lambda i, h, j: (i, h, j, 0, 0)),
                   pl.BlockSpec((None, None, None, mp), lambda i, h, j: (i, h, j, 0))],
        out_shape=[jax.ShapeDtypeStruct((p, kv, splits, mp, d), f32),
                   jax.ShapeDtypeStruct((p, kv, splits, mp), f32)],
        compiler_params=params(num_warps=_warps(mp, d)),
        interpret=interpret, name="prefix_decode_attention",
    )(first, qa, prefix_k.astype(dt), prefix_v.astype(dt), bias)

    # Own slots: q [rows, kv, groups (padded), d]; the step as a 0-d int32 input.
    qb = _pad_rows(q.reshape(rows, kv, g, d), gp)
    o_b, lse_b = pl.pallas_call(
        functools.partial(_own_kernel, bn=bn, scale=scale, upcast=interpret),
        grid=(rows, kv),
        in_specs=[pl.BlockSpec((), lambda r, h: ()),
                  pl.BlockSpec((None, None, gp, d), lambda r, h: (r, h, 0, 0)),
                  pl.BlockSpec((None, None, d, n), lambda r, h: (r, h, 0, 0)),
                  pl.BlockSpec((None, None, n, d), lambda r, h: (r, h, 0, 0))],
        out_specs=[pl.BlockSpec((None, None, gp, d), lambda r, h: (r, h, 0, 0)),
                   pl.BlockSpec((None, None, gp), lambda r, h: (r, h, 0))],
        out_shape=[jax.ShapeDtypeStruct((rows, kv, gp, d), f32), jax.ShapeDtypeStruct((rows, kv, gp), f32)],
        compiler_params=params(num_warps=_warps(gp, d)),
        interpret=interpret, name="own_decode_attention",
    )(jnp.asarray(step, jnp.int32).reshape(()), qb, own_k.astype(dt), own_v.astype(dt))

    # Merge: prefix splits back to [rows, kv, split, groups, (d)], then every part weighted by exp(its lse - max
    # lse). The own part always holds slot 0, so the max is a real score and fully masked splits weigh 0.
    o_a = o_a[..., :m, :].reshape(p, kv, splits, s, g, d).transpose(0, 3, 1, 2, 4, 5).reshape(rows, kv, splits, g, d)
    lse_a = lse_a[..., :m].reshape(p, kv, splits, s, g).transpose(0, 3, 1, 2, 4).reshape(rows, kv, splits, g)
    o_b, lse_b = o_b[:, :, :g], lse_b[:, :, :g]
    top = jnp.maximum(jnp.max(lse_a, axis=2), lse_b)
    w_a, w_b = jnp.exp(lse_a - top[:, :, None]), jnp.exp(lse_b - top)
    out = (jnp.sum(w_a[..., None] * o_a, axis=2) + w_b[..., None] * o_b) / (jnp.sum(w_a, axis=2) + w_b)[..., None]
    return out.astype(dt)


def attend_shared_fused(q: jax.Array, prefix_k: jax.Array, prefix_v: jax.Array, prefix_mask: jax.Array,
                        own_k: jax.Array, own_v: jax.Array, step: jax.Array | int, *,
                        interpret: bool | None = None) -> jax.Array:
    """Grouped decode attention over each prompt's shared K/V plus each row's own slots 0..step (see the module
    docstring for layouts) -> [rows, kv, groups, d] in q's dtype, as `decode.attend_shared`.

    `interpret` (default: True unless the default backend is a GPU) runs the kernels in Pallas interpret mode.
    Shapes must pass `supported` (ValueError otherwise).
    """
    if not supported(q.shape, q.shape[-1], prefix_v.shape[2], own_v.shape[2]):
        raise ValueError(f"attend_shared_fused does not take q {q.shape}, prefix slots {prefix_v.shape[2]}, own "
                         f"slots {own_v.shape[2]}: check `supported` and use decode.attend_shared")
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    return _fused(q, prefix_k, prefix_v, prefix_mask, own_k, own_v, step, interpret=interpret)
