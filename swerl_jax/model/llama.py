"""The decoder in Flax Linen: Llama 3 and its families (Qwen3's q/k norm, Qwen2's q/k/v bias; see
`config.FAMILIES`), numerically matching Hugging Face's `LlamaForCausalLM`, `Qwen3ForCausalLM`, `Qwen2ForCausalLM`.

Layers are stacked with `nn.scan` (one compiled layer body, parameters with a leading `layers` axis), so
compile time does not grow with depth. Every parameter carries logical axis names (`embed`, `mlp`,
`q_heads`, `kv_heads`, `head_dim`, `vocab`, `layers`, `norm`) and major activations are constrained with
`activation_*` names; `swerl_jax.sharding` maps them onto the device mesh.

The same module serves training (no cache) and decoding: pass a `KVCache` and the slot at which the new
tokens are written. Attention masks are given per key slot (`kv_mask`), causality is by slot index, and
RoPE uses explicit `positions`, which is what left-padded batches need.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from swerl_jax.model.attention import dot_product_attention
from swerl_jax.model.config import LlamaConfig

Array = jax.Array


class KVCache(NamedTuple):
    """Keys and values of every layer: [layers, batch, max_len, kv_heads, head_dim]."""

    k: Array
    v: Array

    @classmethod
    def zeros(cls, config: LlamaConfig, batch: int, max_len: int, dtype: str | None = None) -> KVCache:
        """An empty cache for `batch` sequences of up to `max_len` tokens."""
        shape = (config.num_layers, batch, max_len, config.num_kv_heads, config.head_size)
        dt = jnp.dtype(dtype or config.dtype)
        return cls(jnp.zeros(shape, dt), jnp.zeros(shape, dt))


def rope_inv_freq(config: LlamaConfig) -> Array:
    """RoPE inverse frequencies, with Llama 3 wavelength-dependent scaling when configured."""
    d = config.head_size
    inv_freq = 1.0 / (config.rope_theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    s = config.rope_scaling
    if s is None:
        return inv_freq
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = jnp.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return jnp.where(medium, smoothed, scaled)


def rope_cos_sin(config: LlamaConfig, positions: Array) -> tuple[Array, Array]:
    """cos/sin tables [batch, seq, head_dim] for integer `positions` [batch, seq] (fp32, as HF computes them)."""
    freqs = positions.astype(jnp.float32)[..., None] * rope_inv_freq(config)
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def rotate_half_rope(x: Array, cos: Array, sin: Array, axis: int = -1) -> Array:
    """HF's rotate-half RoPE along `axis` (the head dim) of `x`; cos/sin broadcast to `x`, cast to its dtype.
    The one RoPE both the model (`apply_rope`) and the sampler's feature-major decode step use."""
    half = x.shape[axis] // 2
    rotated = jnp.concatenate([-jax.lax.slice_in_dim(x, half, x.shape[axis], axis=axis),
                               jax.lax.slice_in_dim(x, 0, half, axis=axis)], axis=axis)
    return x * cos.astype(x.dtype) + rotated * sin.astype(x.dtype)


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """Rotate `x` [batch, seq, heads, head_dim] with HF's rotate-half convention."""
    return rotate_half_rope(x, cos[:, :, None, :], sin[:, :, None, :])


def rms_normalize(x: Array, scale: Array, eps: float, dtype: Any, axis: int = -1) -> Array:
    """HF's LlamaRMSNorm along `axis`: mean square in fp32, then `scale * normed` in `dtype`. The one RMSNorm both
    the model and the sampler's feature-major decode step use."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=axis, keepdims=True) + eps)
    return scale * normed.astype(dtype)


def _param(module: nn.Module, name: str, shape: tuple[int, ...], axes: tuple[str, ...], init, dtype) -> Array:
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, jnp.dtype(dtype))


class RMSNorm(nn.Module):
    """Root-mean-square layer norm, computed in fp32 like HF's LlamaRMSNorm."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = self.config
        scale = _param(self, "scale", (cfg.hidden_size,), ("norm",), nn.initializers.ones, cfg.param_dtype)
        return rms_normalize(x, scale.astype(cfg.dtype), cfg.rms_norm_eps, cfg.dtype)


class Attention(nn.Module):
    """Grouped-query self-attention with RoPE and an optional KV cache."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, x: Array, cos: Array, sin: Array, mask: Array, cache: tuple[Array, Array] | None,
                 cache_index: Array | None) -> tuple[Array, tuple[Array, Array] | None]:
        cfg = self.config
        e, h, kvh, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_size
        init = nn.initializers.normal(0.02)
        wq = _param(self, "q_proj", (e, h, d), ("embed", "q_heads", "head_dim"), init, cfg.param_dtype)
        wk = _param(self, "k_proj", (e, kvh, d), ("embed", "kv_heads", "head_dim"), init, cfg.param_dtype)
        wv = _param(self, "v_proj", (e, kvh, d), ("embed", "kv_heads", "head_dim"), init, cfg.param_dtype)
        wo = _param(self, "o_proj", (h, d, e), ("q_heads", "head_dim", "embed"), init, cfg.param_dtype)
        dt = jnp.dtype(cfg.dtype)
        q = jnp.einsum("bte,ehd->bthd", x, wq.astype(dt))
        k = jnp.einsum("bte,ehd->bthd", x, wk.astype(dt))
        v = jnp.einsum("bte,ehd->bthd", x, wv.astype(dt))
        if cfg.qkv_bias:  # Qwen2: biases [heads, head_dim] broadcast over batch and sequence
            zeros = nn.initializers.zeros
            q = q + _param(self, "q_bias", (h, d), ("q_heads", "head_dim"), zeros, cfg.param_dtype).astype(dt)
            k = k + _param(self, "k_bias", (kvh, d), ("kv_heads", "head_dim"), zeros, cfg.param_dtype).astype(dt)
            v = v + _param(self, "v_bias", (kvh, d), ("kv_heads", "head_dim"), zeros, cfg.param_dtype).astype(dt)
        if cfg.qk_norm:  # Qwen3: RMSNorm of every head over head_dim (one scale for all heads), before RoPE
            ones = nn.initializers.ones
            q = rms_normalize(q, _param(self, "q_norm_scale", (d,), ("head_dim",), ones, cfg.param_dtype).astype(dt),
                              cfg.rms_norm_eps, dt)
            k = rms_normalize(k, _param(self, "k_norm_scale", (d,), ("head_dim",), ones, cfg.param_dtype).astype(dt),
                              cfg.rms_norm_eps, dt)
        q = nn.with_logical_constraint(apply_rope(q, cos, sin),
                                       ("activation_batch", "activation_length", "activation_heads", None))
        k = apply_rope(k, cos, sin)
        new_cache = None
        if cache is not None:
            ck = jax.lax.dynamic_update_slice_in_dim(cache[0], k.astype(cache[0].dtype), cache_index, axis=1)
            cv = jax.lax.dynamic_update_slice_in_dim(cache[1], v.astype(cache[1].dtype), cache_index, axis=1)
            new_cache = (ck, cv)
            k, v = ck.astype(dt), cv.astype(dt)
        with jax.named_scope("attention"):  # the scopes name the parts of a profile (benchmarks/profile_split.py)
            out = dot_product_attention(q, k, v, mask, d ** -0.5, cfg.attention_impl)
        out = nn.with_logical_constraint(out, ("activation_batch", "activation_length", "activation_heads", None))
        return jnp.einsum("bthd,hde->bte", out, wo.astype(dt)), new_cache


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = self.config
        e, f = cfg.hidden_size, cfg.intermediate_size
        init = nn.initializers.normal(0.02)
        gate = _param(self, "gate_proj", (e, f), ("embed", "mlp"), init, cfg.param_dtype)
        up = _param(self, "up_proj", (e, f), ("embed", "mlp"), init, cfg.param_dtype)
        down = _param(self, "down_proj", (f, e), ("mlp", "embed"), init, cfg.param_dtype)
        dt = jnp.dtype(cfg.dtype)
        hidden = jax.nn.silu(x @ gate.astype(dt)) * (x @ up.astype(dt))
        hidden = nn.with_logical_constraint(hidden, ("activation_batch", "activation_length", "activation_mlp"))
        return hidden @ down.astype(dt)


class DecoderLayer(nn.Module):
    """Pre-norm attention block + pre-norm MLP block, both residual; the body that `nn.scan` repeats."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, x: Array, cos: Array, sin: Array, mask: Array, cache: tuple[Array, Array] | None,
                 cache_index: Array | None) -> tuple[Array, tuple[Array, Array] | None]:
        act_axes = ("activation_batch", "activation_length", "activation_embed")
        x = nn.with_logical_constraint(x, act_axes)
        attn, new_cache = Attention(self.config, name="self_attn")(
            RMSNorm(self.config, name="input_layernorm")(x), cos, sin, mask, cache, cache_index)
        x = x + attn
        x = x + MLP(self.config, name="mlp")(RMSNorm(self.config, name="post_attention_layernorm")(x))
        return nn.with_logical_constraint(x, act_axes), new_cache


def _remat_policy(name: str):
    if name == "full":
        return None
    policy = getattr(jax.checkpoint_policies, name, None)
    if policy is None:
        raise ValueError(f"model.remat={name!r} is not 'none', 'full' or a jax.checkpoint_policies name")
    return policy


class Llama(nn.Module):
    """The causal LM (Llama 3, or the family `config.family` names). `__call__` returns (logits or final hidden
    states, updated cache or None)."""

    config: LlamaConfig

    def setup(self) -> None:
        cfg = self.config
        self.embed_tokens = self.param(
            "embed_tokens", nn.with_logical_partitioning(nn.initializers.normal(0.02), ("vocab", "embed")),
            (cfg.vocab_size, cfg.hidden_size), jnp.dtype(cfg.param_dtype))
        layer = DecoderLayer
        if cfg.remat != "none":
            layer = nn.remat(layer, policy=_remat_policy(cfg.remat), prevent_cse=False)
        self.layers = nn.scan(
            layer, variable_axes={"params": 0}, split_rngs={"params": True},
            in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, 0, nn.broadcast),
            length=cfg.num_layers, metadata_params={nn.PARTITION_NAME: "layers"})(cfg, name="layers")
        self.norm = RMSNorm(cfg, name="norm")
        if not cfg.tie_word_embeddings:
            self.lm_head = self.param(
                "lm_head", nn.with_logical_partitioning(nn.initializers.normal(0.02), ("embed", "vocab")),
                (cfg.hidden_size, cfg.vocab_size), jnp.dtype(cfg.param_dtype))

    def __call__(self, tokens: Array, positions: Array, kv_mask: Array, cache: KVCache | None = None,
                 cache_index: Array | int | None = None, return_hidden: bool = False,
                 segment_ids: Array | None = None) -> tuple[Array, KVCache | None]:
        """Run the decoder.

        Args:
          tokens: [batch, seq] token ids.
          positions: [batch, seq] RoPE positions (left-padded rows start counting at their first real token).
          kv_mask: [batch, keys] bool, True where a key slot holds a real token. Without a cache, keys are the
            input tokens (keys == seq); with a cache, keys are the cache slots (keys == max_len).
          cache: optional KVCache; the new keys/values are written at slots [cache_index, cache_index + seq).
          cache_index: first slot to write (scalar).
          return_hidden: return the final normed hidden states [batch, seq, hidden] instead of logits.
          segment_ids: [batch, seq] int, packed rows (`batching.pack_segments`): a token attends only to keys of
            its own segment (no cache). Only for attention kernels that take any mask (XLA, "cudnn_masked").

        Returns:
          logits [batch, seq, vocab] in fp32 (or hidden states), and the updated cache (None without one).
        """
        cfg = self.config
        dt = jnp.dtype(cfg.dtype)
        x = jnp.take(self.embed_tokens, tokens, axis=0).astype(dt)
        cos, sin = rope_cos_sin(cfg, positions)
        seq = tokens.shape[1]
        start = 0 if cache is None else cache_index
        query_slot = start + jnp.arange(seq)
        key_slot = jnp.arange(kv_mask.shape[1])
        causal = key_slot[None, :] <= query_slot[:, None]
        mask = causal[None, None, :, :] & kv_mask[:, None, None, :].astype(bool)
        if segment_ids is not None:
            if cache is not None or cfg.attention_impl in ("cudnn", "pallas"):
                raise ValueError(f"packed rows (segment_ids) need attention over any mask and no cache; "
                                 f"model.attention_impl={cfg.attention_impl!r} assumes one sequence per row")
            mask = mask & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
        layer_cache = None if cache is None else (cache.k, cache.v)
        x, new_layer_cache = self.layers(x, cos, sin, mask, layer_cache, start)
        x = self.norm(x)
        new_cache = None if cache is None else KVCache(*new_layer_cache)
        if return_hidden:
            return x, new_cache
        return self.logits(x), new_cache

    def logits(self, hidden: Array) -> Array:
        """Project hidden states [..., hidden] to fp32 vocabulary logits."""
        head = self.embed_tokens.T if self.config.tie_word_embeddings else self.lm_head
        if hidden.dtype == jnp.float32:  # autodiff's backward is fp32 already: keep its exact rounding
            logits = jnp.einsum("...e,ev->...v", hidden, head.astype(hidden.dtype),
                                preferred_element_type=jnp.float32)
        else:
            logits = head_logits(hidden, head.astype(hidden.dtype))
        return nn.with_logical_constraint(logits, ("activation_batch", "activation_length", "activation_vocab"))


@jax.custom_vjp
def head_logits(hidden: Array, head: Array) -> Array:
    """fp32 logits hidden [..., e] @ head [e, v] (both in the compute dtype), whose backward runs in that dtype.

    Plain autodiff would give the two backward matmuls the fp32 cotangent of the fp32 logits, i.e. fp32 GEMMs
    (TF32 on a GPU) over the whole vocabulary: on an H200, Llama-3.2-1B at 4 x 4096 tokens, 62 of a 425 ms step
    against 11 ms for the bf16 forward (BENCHMARKS.md). The cotangent is cast to the compute dtype first, as
    mixed-precision training does for every other layer. `Llama.logits` uses it for bf16/fp16 compute only: in
    fp32 its gradients equal autodiff's up to rounding, and the CPU GRPO demo's trajectory is chaotic enough that
    a rounding change turned its rising reward into a collapse (tests/test_demo.py caught it).
    """
    return jnp.einsum("...e,ev->...v", hidden, head, preferred_element_type=jnp.float32)


def _head_logits_fwd(hidden: Array, head: Array) -> tuple[Array, tuple[Array, Array]]:
    return head_logits(hidden, head), (hidden, head)


def _head_logits_bwd(res: tuple[Array, Array], g: Array) -> tuple[Array, Array]:
    hidden, head = res
    g = g.astype(hidden.dtype)
    d_hidden = jnp.einsum("...v,ev->...e", g, head, preferred_element_type=jnp.float32).astype(hidden.dtype)
    d_head = jnp.einsum("...e,...v->ev", hidden, g, preferred_element_type=jnp.float32).astype(head.dtype)
    return d_hidden, d_head


head_logits.defvjp(_head_logits_fwd, _head_logits_bwd)


def positions_from_mask(attention_mask: Array) -> Array:
    """RoPE positions for a (possibly left-padded) [batch, seq] mask: 0 at each row's first real token."""
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)


def init_params(config: LlamaConfig, rng: Array) -> dict:
    """Randomly initialised parameters (unboxed: plain arrays), for tests and from-scratch runs."""
    model = Llama(config)
    tokens = jnp.zeros((1, 1), jnp.int32)
    variables = model.init(rng, tokens, tokens, jnp.ones((1, 1), bool))
    return nn.meta.unbox(variables["params"])


def forward(config: LlamaConfig, params: dict, tokens: Array, attention_mask: Array | None = None) -> Array:
    """Logits [batch, seq, vocab] (fp32) of a full, possibly left-padded batch without a cache."""
    if attention_mask is None:
        attention_mask = jnp.ones(tokens.shape, bool)
    logits, _ = Llama(config).apply({"params": params}, tokens, positions_from_mask(attention_mask),
                                    attention_mask)
    return logits


def token_logprobs(config: LlamaConfig, params: dict, tokens: Array, attention_mask: Array,
                   targets: Array | None = None, chunk_size: int = 1024, with_entropy: bool = False,
                   temperature: float = 1.0, start: int = 0, length: int | None = None,
                   positions: Array | None = None, segment_ids: Array | None = None,
                   rope_positions: Array | None = None) -> Array | tuple[Array, Array]:
    """Log-probabilities of `targets` (default: the next token, tokens shifted left) at every position.

    The vocabulary projection, log-sum-exp and gather run chunk by chunk over the sequence, so full-vocab
    logits exist for at most `chunk_size` positions at a time and are never normalised twice. `start` and
    `length` (static) restrict the projection to positions [start, start + length): RL scores only the
    completion, which is a fraction of a long prompt + completion sequence. `positions` [batch, K] (indices into
    that window; entries >= length are padding) projects only those positions: an agent episode's loss covers the
    model's own tokens, not the tool observations between them, and the vocabulary projection dominates a small
    model's cost. The other positions of the result are 0. `segment_ids` and `rope_positions` [batch, seq]
    describe packed rows (`batching.pack_segments`): attention within a segment, RoPE counting from each
    segment's start.

    Returns:
      logp [batch, length] fp32 (the last position has no next token when targets is None: its value is 0),
      and, if `with_entropy`, the entropy of each position's distribution [batch, length].
    """
    model = Llama(config)
    rope = positions_from_mask(attention_mask) if rope_positions is None else rope_positions
    hidden, _ = model.apply({"params": params}, tokens, rope, attention_mask, return_hidden=True,
                            segment_ids=segment_ids)
    if targets is None:
        targets = jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)
    length = hidden.shape[1] - start if length is None else length
    hidden = jax.lax.slice_in_dim(hidden, start, start + length, axis=1)
    targets = jax.lax.slice_in_dim(targets, start, start + length, axis=1)
    window = length
    if positions is not None:
        hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1, mode="clip")
        targets = jnp.take_along_axis(targets, positions, axis=1, mode="clip")
    b, t, e = hidden.shape
    chunk = min(chunk_size, t)
    pad = (-t) % chunk
    hidden_c = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, -1, chunk, e).swapaxes(0, 1)
    targets_c = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, -1, chunk).swapaxes(0, 1)

    @jax.named_scope("vocab_head")
    def one_chunk(args):
        h, tgt = args
        logits = model.apply({"params": params}, h, method=Llama.logits) / temperature
        lse = jax.nn.logsumexp(logits, axis=-1)
        picked = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0]
        if not with_entropy:
            return picked - lse, jnp.zeros_like(lse)
        probs = jnp.exp(logits - lse[..., None])
        return picked - lse, lse - jnp.sum(probs * logits, axis=-1)

    logp, entropy = jax.lax.map(one_chunk, (hidden_c, targets_c))
    logp = logp.swapaxes(0, 1).reshape(b, -1)[:, :t]
    entropy = entropy.swapaxes(0, 1).reshape(b, -1)[:, :t]
    if positions is not None:  # back to the window's layout (padding entries are dropped)
        rows = jnp.arange(b)[:, None]
        logp = jnp.zeros((b, window), logp.dtype).at[rows, positions].set(logp, mode="drop")
        entropy = jnp.zeros((b, window), entropy.dtype).at[rows, positions].set(entropy, mode="drop")
    return (logp, entropy) if with_entropy else logp
