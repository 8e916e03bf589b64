"""Random transformers models of every family (the independent reference) for the model tests."""

from __future__ import annotations

import pathlib

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.convert import llama_to_hf_config


def random_hf_model(config: LlamaConfig, seed: int = 0) -> PreTrainedModel:
    """An fp32 HF model of `config` (`LlamaForCausalLM`, `Qwen2ForCausalLM` or `Qwen3ForCausalLM` by family) with
    every weight random (norm scales and biases too, so their mapping is tested)."""
    hf = {k: v for k, v in llama_to_hf_config(config).items() if k not in ("architectures", "model_type")}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config.family, **hf)).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.05 * noise)
    return model


def save_random_hf(config: LlamaConfig, out_dir: pathlib.Path, seed: int = 0, **save_kwargs) -> PreTrainedModel:
    """`random_hf_model` saved with transformers' own `save_pretrained` (so load_hf reads HF-written files)."""
    model = random_hf_model(config, seed)
    model.save_pretrained(out_dir, **save_kwargs)
    return model


def left_padded_batch(vocab: int, pad: int = 5, t: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, mask) [2, t]: the first row left-padded by `pad` tokens, the second full; ids cover the top of the
    vocab."""
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, vocab, (2, t))
    tokens[1, -1] = vocab - 1
    mask = np.ones((2, t), bool)
    mask[0, :pad] = False
    tokens[0, :pad] = 0
    return tokens, mask


def hf_greedy(hf_model: PreTrainedModel, prompt: list[int], n: int) -> list[int]:
    """transformers' `generate`, greedy, exactly `n` new tokens (no EOS stop) after `prompt`."""
    ids = torch.tensor([prompt])
    out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                            min_new_tokens=n, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def hf_logits(hf_model: PreTrainedModel, tokens: np.ndarray, mask: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """transformers' fp32 logits of a (left-padded) batch at the given positions: the parity tests' reference."""
    with torch.no_grad():
        return hf_model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask.astype(np.int64)),
                        position_ids=torch.tensor(positions, dtype=torch.long)).logits.numpy()
