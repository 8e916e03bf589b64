"""The Llama 3 architecture hyper-parameters and the registry of named model configs."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama 3 frequency scaling of RoPE (`rope_type: llama3` in Hugging Face configs)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Architecture of a Llama 3 decoder; field names follow Hugging Face's `LlamaConfig` where they exist."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None
    rope_theta: float = 500000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 131072
    # Numerics: parameters are stored in `param_dtype`, matmuls run in `dtype`; logits are always fp32.
    param_dtype: str = "float32"
    dtype: str = "float32"
    # Rematerialisation per decoder layer: "none", "full" (save nothing) or a jax.checkpoint_policies name.
    remat: str = "none"
    # attention kernel (model/attention.py): None (XLA), "cudnn" (causal flash attention on Hopper GPUs),
    # "cudnn_masked" (cuDNN with the mask as a bias: any mask, all blocks), "pallas" (TPU splash).
    attention_impl: str | None = None

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model.num_heads={self.num_heads} is not a multiple of model.num_kv_heads={self.num_kv_heads}"
            )
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model.{name} must be positive, got {getattr(self, name)}")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} is not divisible by model.num_heads={self.num_heads}; "
                "set model.head_dim explicitly"
            )

    @property
    def head_size(self) -> int:
        """Per-head dimension (explicit `head_dim`, else hidden_size / num_heads)."""
        return self.head_dim or self.hidden_size // self.num_heads

    def num_params(self) -> int:
        """Exact parameter count (embeddings included, the tied head counted once)."""
        e, f, d = self.hidden_size, self.intermediate_size, self.head_size
        attn = e * d * (2 * self.num_heads + 2 * self.num_kv_heads)
        layer = attn + 3 * e * f + 2 * e
        head = 0 if self.tie_word_embeddings else e * self.vocab_size
        return self.vocab_size * e + self.num_layers * layer + e + head

    def replace(self, **changes: Any) -> LlamaConfig:
        """A copy with some fields changed (e.g. dtype or remat from the experiment config)."""
        return dataclasses.replace(self, **changes)


_LLAMA3_SCALING = RopeScaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                              original_max_position_embeddings=8192)

MODEL_CONFIGS: dict[str, LlamaConfig] = {
    "llama3.2-1b": LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16,
                               num_heads=32, num_kv_heads=8, head_dim=64, rope_scaling=_LLAMA3_SCALING,
                               tie_word_embeddings=True),
    "llama3.2-3b": LlamaConfig(vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_layers=28,
                               num_heads=24, num_kv_heads=8, head_dim=128, rope_scaling=_LLAMA3_SCALING,
                               tie_word_embeddings=True),
    "llama3.1-8b": LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
                               num_heads=32, num_kv_heads=8, rope_scaling=RopeScaling(factor=8.0)),
    "llama3.3-70b": LlamaConfig(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_layers=80,
                                num_heads=64, num_kv_heads=8, rope_scaling=RopeScaling(factor=8.0)),
    # Qwen3-32B's shape (DeepSWE's policy) for planning and compiling: Qwen3 adds RMSNorm on q and k per head,
    # which this Llama implementation does not have (its parameters are <0.01%; a real Qwen3 run needs it).
    "qwen3-32b": LlamaConfig(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_layers=64,
                             num_heads=64, num_kv_heads=8, head_dim=128, rope_theta=1000000.0,
                             max_position_embeddings=40960),
    "smollm2-135m": LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                                num_heads=9, num_kv_heads=3, rope_theta=100000.0, tie_word_embeddings=True,
                                max_position_embeddings=8192),
    # The CPU demo's policy: SmolLM2's 49152-token vocabulary over a small decoder (~7M params).
    "demo-7m": LlamaConfig(vocab_size=49152, hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4,
                           num_kv_heads=2, rope_theta=10000.0, tie_word_embeddings=True,
                           max_position_embeddings=4096),
    # Test configs: GQA, llama3 scaling, tied and untied heads, odd vocab sizes.
    "tiny": LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                        num_kv_heads=2, rope_theta=10000.0, max_position_embeddings=2048),
    "tiny-gqa-untied": LlamaConfig(vocab_size=1003, hidden_size=96, intermediate_size=160, num_layers=3,
                                   num_heads=6, num_kv_heads=2, rope_theta=10000.0,
                                   rope_scaling=RopeScaling(factor=8.0, original_max_position_embeddings=64),
                                   max_position_embeddings=2048),
    "tiny-tied": LlamaConfig(vocab_size=777, hidden_size=48, intermediate_size=112, num_layers=2, num_heads=3,
                             num_kv_heads=1, rope_theta=10000.0, tie_word_embeddings=True,
                             max_position_embeddings=2048),
}


def get_model_config(name: str, **overrides: Any) -> LlamaConfig:
    """The registered config `name` with `overrides` applied; a clear error lists the known names."""
    if name not in MODEL_CONFIGS:
        raise KeyError(f"unknown model.name={name!r}; known: {', '.join(sorted(MODEL_CONFIGS))}")
    return MODEL_CONFIGS[name].replace(**overrides) if overrides else MODEL_CONFIGS[name]
