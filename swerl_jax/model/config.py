"""The decoder's hyper-parameters and the registry of named model configs.

Model families are configurations of one decoder (`swerl_jax.model.llama`), as in MaxText and tunix, not forks:
Llama 3 is the base; Qwen3 adds an RMSNorm per head on q and k (`qk_norm`); Qwen2 / Qwen2.5 add a bias on the
q, k and v projections (`qkv_bias`). `FAMILIES` says which features each family has; a config names its `family`.
"""

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
class Family:
    """What a model family adds to the Llama 3 decoder (its Hugging Face names live in `model.convert`)."""

    qk_norm: bool  # RMSNorm over head_dim on each query and key head, after the projection, before RoPE
    qkv_bias: bool  # a bias on the q, k and v projections (never on o_proj)


FAMILIES: dict[str, Family] = {
    "llama": Family(qk_norm=False, qkv_bias=False),
    "qwen2": Family(qk_norm=False, qkv_bias=True),  # Qwen2 and Qwen2.5 (model_type "qwen2")
    "qwen3": Family(qk_norm=True, qkv_bias=False),
}


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Architecture of the decoder (Llama 3 and the families of `FAMILIES`); field names follow Hugging Face's
    `LlamaConfig` where they exist."""

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
    # The family, a key of FAMILIES: which features the decoder adds to Llama 3's (`qk_norm`, `qkv_bias`).
    family: str = "llama"
    # Numerics: parameters are stored in `param_dtype`, matmuls run in `dtype`; logits are always fp32.
    param_dtype: str = "float32"
    dtype: str = "float32"
    # Rematerialisation per decoder layer: "none", "full" (save nothing) or a jax.checkpoint_policies name.
    remat: str = "none"
    # attention kernel (model/attention.py): None (XLA), "cudnn" (causal flash attention on Hopper GPUs),
    # "cudnn_masked" (cuDNN with the mask as a bias: any mask, all blocks), "pallas" (TPU splash).
    attention_impl: str | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"model.family={self.family!r} is not one of {sorted(FAMILIES)}")
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
    def qk_norm(self) -> bool:
        """Whether each query and key head is RMS-normalised over head_dim before RoPE (Qwen3)."""
        return FAMILIES[self.family].qk_norm

    @property
    def qkv_bias(self) -> bool:
        """Whether the q, k and v projections have a bias (Qwen2 / Qwen2.5)."""
        return FAMILIES[self.family].qkv_bias

    @property
    def head_size(self) -> int:
        """Per-head dimension (explicit `head_dim`, else hidden_size / num_heads)."""
        return self.head_dim or self.hidden_size // self.num_heads

    def num_params(self) -> int:
        """Exact parameter count (embeddings included, the tied head counted once, norms and biases too)."""
        e, f, d = self.hidden_size, self.intermediate_size, self.head_size
        attn = e * d * (2 * self.num_heads + 2 * self.num_kv_heads)
        attn += 2 * d if self.qk_norm else 0  # one q and one k scale over head_dim, shared by the heads
        attn += (self.num_heads + 2 * self.num_kv_heads) * d if self.qkv_bias else 0
        layer = attn + 3 * e * f + 2 * e
        head = 0 if self.tie_word_embeddings else e * self.vocab_size
        return self.vocab_size * e + self.num_layers * layer + e + head

    def replace(self, **changes: Any) -> LlamaConfig:
        """A copy with some fields changed (e.g. dtype or remat from the experiment config)."""
        return dataclasses.replace(self, **changes)


_LLAMA3_SCALING = RopeScaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                              original_max_position_embeddings=8192)

# `model.name` for "whatever model.hf_dir's config.json describes" (evaluating a folder): any other name must agree
# with the checkpoint (swerl_jax/policy.py::model_config_from).
FROM_CHECKPOINT = "hf"

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
    # DeepSWE's policy (Qwen/Qwen3-32B's config.json): per-head q/k RMSNorm, head_dim 128 (not 5120 / 64), untied.
    "qwen3-32b": LlamaConfig(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_layers=64,
                             num_heads=64, num_kv_heads=8, head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6,
                             max_position_embeddings=40960, family="qwen3"),
    # Qwen/Qwen3-0.6B and Qwen/Qwen2.5-0.5B-Instruct: the small members of each family (tied heads).
    "qwen3-0.6b": LlamaConfig(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_layers=28,
                              num_heads=16, num_kv_heads=8, head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6,
                              tie_word_embeddings=True, max_position_embeddings=40960, family="qwen3"),
    "qwen2.5-0.5b": LlamaConfig(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                                num_heads=14, num_kv_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
                                tie_word_embeddings=True, max_position_embeddings=32768, family="qwen2"),
    "smollm2-135m": LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                                num_heads=9, num_kv_heads=3, rope_theta=100000.0, tie_word_embeddings=True,
                                max_position_embeddings=8192),
    # The CPU demo's policy: SmolLM2's 49152-token vocabulary over a small decoder (~7M params).
    "demo-7m": LlamaConfig(vocab_size=49152, hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4,
                           num_kv_heads=2, rope_theta=10000.0, tie_word_embeddings=True,
                           max_position_embeddings=4096),
    # The CPU testbed's policies (experiments/testbed_cpu.py): the testbed's 2,048-token vocabulary
    # (model.tokenizer="testbed"), so the decoder, not the head, holds the parameters and the FLOPs.
    "testbed-128x4": LlamaConfig(vocab_size=2048, hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4,
                                 num_kv_heads=2, rope_theta=10000.0, tie_word_embeddings=True,
                                 max_position_embeddings=4096),
    "testbed-256x6": LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=768, num_layers=6, num_heads=8,
                                 num_kv_heads=4, rope_theta=10000.0, tie_word_embeddings=True,
                                 max_position_embeddings=4096),
    # The GPU testbed's policy (experiments/testbed_gpu.py): 26M parameters, 8 heads of 64 (cuDNN's head size).
    "testbed-512x8": LlamaConfig(vocab_size=2048, hidden_size=512, intermediate_size=1536, num_layers=8,
                                 num_heads=8, num_kv_heads=4, rope_theta=10000.0, tie_word_embeddings=True,
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
    # Qwen3 untied with head_dim 24 != 80 / 5 (and GQA 5:1 heads); Qwen2 tied with biases and GQA 6:2.
    "tiny-qwen3": LlamaConfig(vocab_size=911, hidden_size=80, intermediate_size=144, num_layers=2, num_heads=5,
                              num_kv_heads=1, head_dim=24, rope_theta=1000000.0, rms_norm_eps=1e-6,
                              max_position_embeddings=2048, family="qwen3"),
    "tiny-qwen3-tied": LlamaConfig(vocab_size=640, hidden_size=64, intermediate_size=96, num_layers=3, num_heads=4,
                                   num_kv_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
                                   tie_word_embeddings=True, max_position_embeddings=2048, family="qwen3"),
    "tiny-qwen2": LlamaConfig(vocab_size=701, hidden_size=96, intermediate_size=136, num_layers=2, num_heads=6,
                              num_kv_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                              max_position_embeddings=2048, family="qwen2"),
}


def get_model_config(name: str, **overrides: Any) -> LlamaConfig:
    """The registered config `name` with `overrides` applied; a clear error lists the known names."""
    if name not in MODEL_CONFIGS:
        raise KeyError(f"unknown model.name={name!r}; known: {', '.join(sorted(MODEL_CONFIGS))}")
    return MODEL_CONFIGS[name].replace(**overrides) if overrides else MODEL_CONFIGS[name]
