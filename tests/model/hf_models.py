"""Random transformers `LlamaForCausalLM` models (the independent reference) for the model tests."""

from __future__ import annotations

import pathlib

import torch
from transformers import LlamaConfig as HFLlamaConfig
from transformers import LlamaForCausalLM

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.convert import llama_to_hf_config


def random_hf_model(config: LlamaConfig, seed: int = 0) -> LlamaForCausalLM:
    """An fp32 HF model of `config` with every weight random (norm scales too, so their mapping is tested)."""
    hf = {k: v for k, v in llama_to_hf_config(config).items() if k not in ("architectures", "model_type")}
    model = LlamaForCausalLM(HFLlamaConfig(**hf)).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.05 * noise)
    return model


def save_random_hf(config: LlamaConfig, out_dir: pathlib.Path, seed: int = 0, **save_kwargs) -> LlamaForCausalLM:
    """`random_hf_model` saved with transformers' own `save_pretrained` (so load_hf reads HF-written files)."""
    model = random_hf_model(config, seed)
    model.save_pretrained(out_dir, **save_kwargs)
    return model
