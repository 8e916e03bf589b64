"""The policy: Llama 3 and its families (Qwen3, Qwen2), config registry, Flax model, Hugging Face conversion,
tokenizer, SmolLM2 checkpoint."""

from swerl_jax.model.config import FAMILIES, MODEL_CONFIGS, LlamaConfig, RopeScaling, get_model_config
from swerl_jax.model.convert import CheckpointError, gguf_to_hf, hf_config_to_llama, load_hf, save_hf
from swerl_jax.model.llama import KVCache, Llama, forward, init_params, positions_from_mask, token_logprobs

__all__ = [
    "FAMILIES", "MODEL_CONFIGS", "CheckpointError", "KVCache", "Llama", "LlamaConfig", "RopeScaling", "forward",
    "get_model_config", "gguf_to_hf", "hf_config_to_llama", "init_params", "load_hf", "positions_from_mask",
    "save_hf", "token_logprobs",
]
