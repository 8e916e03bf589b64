"""One decode step of the sampler: per-layer weights and a per-layer head-major KV cache, no copies.

`decode_weights` splits the stacked Llama weights once per generate call into per-layer arrays with q/k/v and
gate/up fused into one matrix each; `decode_step` runs the layers unrolled over them, so XLA:CPU reads every
weight and cache slot in place (a fori_loop over stacked layers copied each layer's weights and K/V slice before
every library matmul). Keys are cached transposed ([rows, kv_heads, head_dim, slots]) so that on CPU attention
is two loop fusions that stream the cache once. RMSNorm and RoPE are llama.py's own functions applied along the
feature-major axes; the grouped attention over the transposed cache is decode's own, and the engine's parity tests
(HF greedy, trainer log-probs) catch drift.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.llama import KVCache, rms_normalize, rope_cos_sin, rotate_half_rope
from swerl_jax.sampler import prefix_attention


def zeros_cache(config: LlamaConfig, rows: int, slots: int) -> tuple[KVCache, ...]:
    """The decode cache: one KVCache per layer, k [rows, kv, head_dim, slots] and v [rows, kv, slots, head_dim]."""
    kv, d, dt = config.num_kv_heads, config.head_size, config.dtype
    return tuple(KVCache(jnp.zeros((rows, kv, d, slots), dt), jnp.zeros((rows, kv, slots, d), dt))
                 for _ in range(config.num_layers))


def fill_cache(cache: tuple[KVCache, ...], prefilled: KVCache, row_src: jax.Array) -> tuple[KVCache, ...]:
    """Write a prefill's keys/values (Llama's stacked [layers, prompts, slots, kv, head_dim]) into the first slots
    of the decode cache, decode row r taking prompt row_src[r]'s."""
    def place(i: int, c: KVCache) -> KVCache:
        k = prefilled.k[i][row_src].transpose(0, 2, 3, 1).astype(c.k.dtype)
        v = prefilled.v[i][row_src].transpose(0, 2, 1, 3).astype(c.v.dtype)
        return KVCache(jax.lax.dynamic_update_slice_in_dim(c.k, k, 0, axis=3),
                       jax.lax.dynamic_update_slice_in_dim(c.v, v, 0, axis=2))
    return tuple(place(i, c) for i, c in enumerate(cache))


def decode_weights(config: LlamaConfig, params: dict) -> dict:
    """Decode weights in the compute dtype: per-layer, transposed to [out, in], q/k/v and gate/up fused.

    Returns {"layers": one dict per layer (+ "qkv_bias" [q + k + v widths, 1] for Qwen2, "q_norm" / "k_norm"
    [head_dim, 1] for Qwen3), "norm": final norm scale [embed, 1], "head": [vocab, embed], "embed":
    the token embedding as stored}. Called inside each engine's jitted program, before
    the decode loop: one copy of the weights per call (~0.1 s for SmolLM2-135M on CPU), after which every matmul
    of every step reads a whole, separate buffer. The [out, in] layout is for `decode_step`'s feature-major
    activations (see there).
    """
    dt = jnp.dtype(config.dtype)
    e, n = config.hidden_size, config.num_layers
    stacked = params["layers"]
    attn, mlp = stacked["self_attn"], stacked["mlp"]
    qkv = jnp.concatenate([attn[name].reshape(n, e, -1) for name in ("q_proj", "k_proj", "v_proj")], axis=-1)
    gate_up = jnp.concatenate([mlp["gate_proj"], mlp["up_proj"]], axis=-1)
    layers = tuple({"input_norm": stacked["input_layernorm"]["scale"][i][:, None].astype(dt),
                    "post_norm": stacked["post_attention_layernorm"]["scale"][i][:, None].astype(dt),
                    "qkv": qkv[i].T.astype(dt), "o": attn["o_proj"][i].reshape(-1, e).T.astype(dt),
                    "gate_up": gate_up[i].T.astype(dt), "down": mlp["down_proj"][i].T.astype(dt)} for i in range(n))
    if config.qkv_bias:  # Qwen2: the q/k/v biases fused as the matmul's rows are, [q + k + v widths, 1]
        bias = jnp.concatenate([attn[f"{name}_bias"].reshape(n, -1) for name in ("q", "k", "v")], axis=-1)
        layers = tuple(layer | {"qkv_bias": bias[i][:, None].astype(dt)} for i, layer in enumerate(layers))
    if config.qk_norm:  # Qwen3: the per-head q/k norm scales as [head_dim, 1] for the [heads, head_dim, rows] q/k
        layers = tuple(layer | {f"{name}_norm": attn[f"{name}_norm_scale"][i][:, None].astype(dt)
                                for name in ("q", "k")} for i, layer in enumerate(layers))
    head = params["embed_tokens"] if config.tie_word_embeddings else params["lm_head"].T
    return {"layers": layers, "norm": params["norm"]["scale"][:, None].astype(dt), "head": head.astype(dt),
            "embed": params["embed_tokens"]}


def _rms_norm(config: LlamaConfig, scale: jax.Array, x: jax.Array) -> jax.Array:
    """llama's RMSNorm over axis 0 of feature-major x [embed, rows]."""
    return rms_normalize(x, scale, config.rms_norm_eps, x.dtype, axis=0)


def _rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """llama's RoPE for feature-major x [heads, head_dim, rows] and cos/sin [head_dim, rows]."""
    return rotate_half_rope(x, cos, sin, axis=1)


def _attend(q: jax.Array, keys_t: jax.Array, values: jax.Array, visible: jax.Array) -> jax.Array:
    """Grouped decode attention over every slot of the cache.

    q [rows, kv, groups, d], keys_t [rows, kv, d, slots] (keys stored transposed), values [rows, kv, slots, d],
    visible [rows, 1, 1, slots] -> [rows, kv, groups, d] in the dtype of q. On CPU both products are
    multiply-reduce loop fusions: with the keys transposed, the score reduction runs over head_dim while the
    vector lanes run along contiguous slots, and the value reduction over slots with lanes along head_dim, so
    every cache byte is read once, in place. Elsewhere they are batched matmuls over (row, kv head).
    """
    dt, f32, on_cpu = q.dtype, jnp.float32, jax.default_backend() == "cpu"
    if on_cpu:
        scores = jnp.sum(q.astype(f32)[..., None] * keys_t.astype(f32)[:, :, None], axis=-2)
    else:
        scores = jnp.einsum("bkgd,bkds->bkgs", q, keys_t.astype(dt), preferred_element_type=f32)
    scores = jnp.where(visible, scores * q.shape[-1] ** -0.5, -0.7 * jnp.finfo(f32).max)
    probs = jax.nn.softmax(scores, axis=-1)
    if on_cpu:
        return jnp.sum(probs[..., None] * values.astype(f32)[:, :, None], axis=-2).astype(dt)
    return jnp.einsum("bkgs,bksd->bkgd", probs.astype(dt), values.astype(dt))


def decode_step(config: LlamaConfig, weights: dict, tokens: jax.Array, positions: jax.Array, kv_mask: jax.Array,
                cache: tuple[KVCache, ...], slot: jax.Array) -> tuple[jax.Array, tuple[KVCache, ...]]:
    """One token per row through the decoder: (logits [rows, vocab] fp32, caches with the token's keys/values).

    The math of `Llama.__call__` with a cache and of `jax.nn.dot_product_attention`'s XLA path, arranged for
    decoding (`weights` from `decode_weights`):
      * the layers are unrolled over per-layer weights and per-layer caches, so every matmul reads its operands
        in place. (Llama's `nn.scan`, or a `fori_loop` indexing stacked weights, makes XLA:CPU copy each layer's
        weights and K/V slice before every library matmul: 36% of a step.)
      * activations are feature-major ([embed, rows]) and every matmul is weight [out, in] @ x [in, rows]: with
        a few rows the library kernels run the long weight dimension as M (XLA:CPU, SmolLM2-135M: the 30 layers'
        matmuls 38 -> 31 ms at 16 rows, 102 -> 83 ms at 64; the vocabulary head 12 -> 8 ms at 16 rows).
      * q/k/v and gate/up are one matmul each (weights fused by `decode_weights`).
      * the cache is head-major, keys transposed ([rows, kv_heads, head_dim, slots]), values not ([rows,
        kv_heads, slots, head_dim]): both attention products run over (row, kv head) blocks as stored (see
        `_attend`); with Llama's [rows, slots, kv_heads, head_dim] layout XLA transposes every layer's keys and
        values at every token, and with untransposed keys the score reduction runs along the contiguous axis.
      * the families' additions (Qwen2's q/k/v bias, Qwen3's per-head q/k RMSNorm) are applied as `Attention`
        applies them: bias after the projection, norm over head_dim, then RoPE.
    Tests hold it to HF greedy and trainer log-prob parity; a change to Llama's attention (soft-capping, windows)
    must be mirrored here.
    """
    visible = ((jnp.arange(kv_mask.shape[1]) <= slot)[None, :] & kv_mask)[:, None, None, :]

    def attention(q: jax.Array, k: jax.Array, v: jax.Array, layer: KVCache) -> tuple[jax.Array, KVCache]:
        k_all = jax.lax.dynamic_update_slice(layer.k, k.transpose(2, 0, 1)[..., None].astype(layer.k.dtype),
                                             (0, 0, 0, slot))
        v_all = jax.lax.dynamic_update_slice(layer.v, v.transpose(2, 0, 1)[:, :, None].astype(layer.v.dtype),
                                             (0, 0, slot, 0))
        return _attend(q, k_all, v_all, visible), KVCache(k_all, v_all)

    return _decode(config, weights, tokens, positions, cache, attention)


def shared_prefix_cache(config: LlamaConfig, prefilled: KVCache, rows: int, num_new: int
                        ) -> tuple[tuple[KVCache, KVCache], ...]:
    """GRPO groups' cache: per layer, (the prompts' own K/V once per prompt, k [prompts, kv, head_dim, prompt
    slots] / v [prompts, kv, prompt slots, head_dim], from a prefill's stacked [layers, prompts, slots, kv,
    head_dim]; each row's new tokens, zeros [rows, kv, head_dim, num_new] / [rows, kv, num_new, head_dim])."""
    own = zeros_cache(config, rows, num_new)
    return tuple((KVCache(prefilled.k[i].transpose(0, 2, 3, 1).astype(config.dtype),
                          prefilled.v[i].transpose(0, 2, 1, 3).astype(config.dtype)), own[i])
                 for i in range(config.num_layers))


def attend_shared(q: jax.Array, prefix: KVCache, own: KVCache, prefix_visible: jax.Array,
                  own_visible: jax.Array) -> jax.Array:
    """Decode attention of GRPO groups: each prompt's cache is read once for all its samples.

    q [prompts, samples, kv, groups, d]; prefix k [prompts, kv, d, T] / v [prompts, kv, T, d]; own k [rows, kv, d,
    N] / v [rows, kv, N, d] with rows = prompts x samples; prefix_visible [prompts, 1, 1, 1, T], own_visible
    [N]. The scores over the prompt's slots and over the row's own slots are one softmax (the same set of scores
    as `_attend` over a copied cache), so outputs agree with it up to float summation order.
    """
    dt, f32 = q.dtype, jnp.float32
    p, s, kv, g, d = q.shape
    neg = -0.7 * jnp.finfo(f32).max
    scale = d ** -0.5
    pre = jnp.einsum("pskgd,pkdt->pskgt", q, prefix.k.astype(dt), preferred_element_type=f32) * scale
    pre = jnp.where(prefix_visible, pre, neg)
    mine = jnp.einsum("rkgd,rkdn->rkgn", q.reshape(p * s, kv, g, d), own.k.astype(dt),
                      preferred_element_type=f32).reshape(p, s, kv, g, -1) * scale
    mine = jnp.where(own_visible, mine, neg)
    probs = jax.nn.softmax(jnp.concatenate([pre, mine], axis=-1), axis=-1)
    t = pre.shape[-1]
    out = jnp.einsum("pskgt,pktd->pskgd", probs[..., :t].astype(dt), prefix.v.astype(dt),
                     preferred_element_type=f32)
    out += jnp.einsum("rkgn,rknd->rkgd", probs[..., t:].reshape(p * s, kv, g, -1).astype(dt), own.v.astype(dt),
                      preferred_element_type=f32).reshape(p, s, kv, g, d)
    return out.reshape(p * s, kv, g, d).astype(dt)


def decode_step_shared(config: LlamaConfig, weights: dict, tokens: jax.Array, positions: jax.Array,
                       prefix_mask: jax.Array, cache: tuple[tuple[KVCache, KVCache], ...], step: jax.Array, *,
                       kernel: str = "xla") -> tuple[jax.Array, tuple[tuple[KVCache, KVCache], ...]]:
    """`decode_step` for GRPO groups (rows = prompts x samples, row r a sample of prompt r // samples) over
    `shared_prefix_cache`: the token's keys/values go to slot `step` of the row's own cache; attention reads each
    prompt's K/V once per group instead of once per row (at 1k-token prompts x 16 samples and 256 new tokens, ~5x
    fewer cache bytes per step). prefix_mask [prompts, T] marks the prompts' real (not left-pad) slots.
    kernel: "xla" (`attend_shared`) or "pallas" (`prefix_attention.attend_shared_fused`, one fused Triton
    kernel pair that also skips own slots past `step`; XLA for shapes it does not take)."""
    if kernel not in ("xla", "pallas"):
        raise ValueError(f"kernel must be 'xla' or 'pallas', got {kernel!r}")
    n_prompts = prefix_mask.shape[0]
    samples = tokens.shape[0] // n_prompts
    prefix_visible = prefix_mask[:, None, None, None, :]

    def attention(q: jax.Array, k: jax.Array, v: jax.Array, layer: tuple[KVCache, KVCache]
                  ) -> tuple[jax.Array, tuple[KVCache, KVCache]]:
        prefix, own = layer
        k_own = jax.lax.dynamic_update_slice(own.k, k.transpose(2, 0, 1)[..., None].astype(own.k.dtype),
                                             (0, 0, 0, step))
        v_own = jax.lax.dynamic_update_slice(own.v, v.transpose(2, 0, 1)[:, :, None].astype(own.v.dtype),
                                             (0, 0, step, 0))
        own = KVCache(k_own, v_own)
        own_visible = jnp.arange(own.v.shape[2]) <= step
        rows, kv, g, d = q.shape
        q = q.reshape(n_prompts, samples, kv, g, d)
        if kernel == "pallas" and prefix_attention.supported(q.shape, d, prefix.v.shape[2], own.v.shape[2]):
            out = prefix_attention.attend_shared_fused(q, prefix.k, prefix.v, prefix_mask, own.k, own.v, step)
        else:
            out = attend_shared(q, prefix, own, prefix_visible, own_visible)
        return out, (prefix, own)

    return _decode(config, weights, tokens, positions, cache, attention)


def _decode(config: LlamaConfig, weights: dict, tokens: jax.Array, positions: jax.Array, cache: tuple,
            attention) -> tuple[jax.Array, tuple]:
    """The decoder layers around an `attention(q [rows, kv, groups, d], k, v [kv, d, rows], layer cache) ->
    (out [rows, kv, groups, d], layer cache)` that writes the token's keys/values into its cache layout."""
    rows, n_heads, n_kv, head_dim = tokens.shape[0], config.num_heads, config.num_kv_heads, config.head_size
    dt = jnp.dtype(config.dtype)
    x = jnp.take(weights["embed"], tokens, axis=0).astype(dt).T  # [embed, rows]
    cos, sin = (t[:, 0].T for t in rope_cos_sin(config, positions[:, None]))  # [head_dim, rows]
    q_width, kv_width = n_heads * head_dim, n_kv * head_dim
    new_cache = []
    for p, layer in zip(weights["layers"], cache):
        qkv = p["qkv"] @ _rms_norm(config, p["input_norm"], x)  # [q + k + v widths, rows]
        if config.qkv_bias:
            qkv = qkv + p["qkv_bias"]
        q = qkv[:q_width].reshape(n_heads, head_dim, rows)
        k = qkv[q_width:q_width + kv_width].reshape(n_kv, head_dim, rows)
        v = qkv[q_width + kv_width:].reshape(n_kv, head_dim, rows)
        if config.qk_norm:  # llama.py's RMSNorm over head_dim (axis 1 here), before RoPE
            q = rms_normalize(q, p["q_norm"], config.rms_norm_eps, q.dtype, axis=1)
            k = rms_normalize(k, p["k_norm"], config.rms_norm_eps, k.dtype, axis=1)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        # query head n attends with kv head n // groups
        q = q.transpose(2, 0, 1).reshape(rows, n_kv, n_heads // n_kv, head_dim)
        out, layer = attention(q, k, v, layer)
        new_cache.append(layer)
        x = x + p["o"] @ out.reshape(rows, q_width).T
        gate_up = p["gate_up"] @ _rms_norm(config, p["post_norm"], x)
        f = gate_up.shape[0] // 2
        x = x + p["down"] @ (jax.nn.silu(gate_up[:f]) * gate_up[f:])
    hidden = _rms_norm(config, weights["norm"], x)
    logits = jnp.matmul(weights["head"], hidden, preferred_element_type=jnp.float32)  # [vocab, rows]
    # The barrier keeps XLA from folding the transpose into the matmul, which picks the slow [rows, vocab] kernel.
    return jax.lax.optimization_barrier(logits).T, tuple(new_cache)


def decode_step_rows(config: LlamaConfig, weights: dict, tokens: jax.Array, positions: jax.Array,
                     kv_mask: jax.Array, cache: tuple[KVCache, ...], slots: jax.Array
                     ) -> tuple[jax.Array, tuple[KVCache, ...]]:
    """`decode_step` where every row writes its token at its own slot (`slots` [rows]): continuous batching, whose
    rows are at different tokens of different requests. `kv_mask` [rows, slots] must already mark each row's
    written slots, this token's included (attention reads exactly those)."""
    rows = tokens.shape[0]
    visible = kv_mask[:, None, None, :]
    r = jnp.arange(rows)

    def attention(q: jax.Array, k: jax.Array, v: jax.Array, layer: KVCache) -> tuple[jax.Array, KVCache]:
        k_all = layer.k.at[r, :, :, slots].set(k.transpose(2, 0, 1).astype(layer.k.dtype))
        v_all = layer.v.at[r, :, slots, :].set(v.transpose(2, 0, 1).astype(layer.v.dtype))
        return _attend(q, k_all, v_all, visible), KVCache(k_all, v_all)

    return _decode(config, weights, tokens, positions, cache, attention)
