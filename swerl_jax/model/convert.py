"""Hugging Face checkpoints <-> swerl_jax params (Llama, Qwen2 / Qwen2.5 and Qwen3 decoders).

An HF directory is `config.json` + safetensors (one `model.safetensors`, or shards listed in
`model.safetensors.index.json`). HF stores every projection as a torch Linear weight [out, in]; our params
are [in, out] with heads split out ([embed, heads, head_dim]) and the layers stacked along a leading axis,
so conversion is transposes and reshapes only: a round trip HF -> params -> HF is bit-exact.

GGUF files (quantized llama.cpp checkpoints) go through `transformers`, which dequantizes them into torch
tensors; `gguf_to_hf` writes those as an ordinary HF directory that `load_hf` then reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.model.config import LlamaConfig, RopeScaling
from swerl_jax.model.hf_load import load_tensors
from swerl_jax.model.hf_stream import (  # noqa: F401 (CheckpointError, INDEX_FILE: re-exported, the names users know)
    INDEX_FILE,
    SINGLE_FILE,
    CheckpointError,
    CheckpointReader,
    TensorMap,
    read_hf_config,
)
from swerl_jax.model.hf_write import save_tensors


def require_hf_dir(path: str | os.PathLike, what: str = "hf_dir") -> pathlib.Path:
    """`path` as a Hugging Face model folder (a config.json with a `model_type`), or FileNotFoundError naming it:
    a run's folder (whose config.json is the experiment's) becomes one with `python -m swerl_jax.eval export`.
    CheckpointError (a ValueError) naming the file when config.json is there but does not parse."""
    folder = pathlib.Path(path)
    if str(path) == "smollm2":  # the packaged model's name (`smollm2.resolve_hf_dir`), converted on first use
        return folder
    try:
        hf = json.loads((folder / "config.json").read_text())
    except OSError:
        hf = {}
    except ValueError as e:  # a config.json that is there but cut short: say so, not "no config.json"
        raise CheckpointError(f"{what}={path}: {folder / 'config.json'} does not parse as JSON ({e}): a truncated "
                              "or broken download?") from None
    if not isinstance(hf, dict) or "model_type" not in hf:
        raise FileNotFoundError(f"{what}={path}: not a Hugging Face model folder (no config.json with a model_type); "
                                "a run's checkpoint becomes one with python -m swerl_jax.eval export")
    return folder


# Each family's Hugging Face names: config.json's model_type (the family's own name) and the architectures that
# load_hf reads (the *Model variants are checkpoints without the head's "model." prefix).
HF_ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "llama": ("LlamaForCausalLM", "LlamaModel"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Model"),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Model"),
}


def _refuse_unsupported(hf: dict, family: str, source: str) -> None:
    """CheckpointError naming the config.json key of anything in `hf` that our decoder does not compute."""
    for key, want in (("hidden_act", "silu"), ("mlp_bias", False)):
        if hf.get(key, want) != want:
            raise CheckpointError(f"{source} {key}={hf[key]!r} is not supported (the {family} family uses {want!r})")
    # Llama's and Qwen3's attention_bias puts a bias on every projection, o_proj included, which we do not
    # have; Qwen2's q/k/v bias is its architecture and transformers ignores the key there.
    if family != "qwen2" and hf.get("attention_bias"):
        raise CheckpointError(f"{source} attention_bias={hf['attention_bias']!r} is not supported (a bias on every "
                              f"attention projection, o_proj included; the {family} family has none)")
    for i, kind in enumerate(hf.get("layer_types") or ()):
        if kind != "full_attention":
            raise CheckpointError(f"{source} layer_types[{i}]={kind!r} is not supported (only full_attention: "
                                  "sliding-window attention is not implemented)")
    window_from = hf.get("max_window_layers", 28)  # transformers: layers >= max_window_layers slide
    if hf.get("use_sliding_window") and hf.get("sliding_window") is not None \
            and int(window_from) < int(hf.get("num_hidden_layers", 0)):
        raise CheckpointError(f"{source} use_sliding_window=True (sliding_window={hf['sliding_window']} from layer "
                              f"{window_from}) is not supported: sliding-window attention is not implemented")


def hf_config_to_llama(hf: dict, param_dtype: str = "float32", source: str = "config.json") -> LlamaConfig:
    """Our `LlamaConfig` from an HF `config.json` dict of a Llama, Qwen2/Qwen2.5 or Qwen3 decoder.

    Raises CheckpointError, naming `source` (the file, for the message) and the key, for another architecture or
    anything we do not implement (rope types other than default/llama3, another activation, MLP or o_proj biases,
    sliding-window attention).
    """
    model_type = hf.get("model_type")
    archs = hf.get("architectures") or []
    if model_type not in HF_ARCHITECTURES or any(a not in HF_ARCHITECTURES[model_type] for a in archs):
        known = ", ".join(f"{t!r} ({a[0]})" for t, a in HF_ARCHITECTURES.items())
        raise CheckpointError(f"{source} describes model_type={model_type!r} architectures={archs}; only these "
                              f"decoders can be converted: {known}")
    family = model_type
    _refuse_unsupported(hf, family, source)
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads") if k not in hf]
    if missing:
        raise CheckpointError(f"{source} lacks required keys: {', '.join(missing)}")
    # transformers >= 5 writes `rope_parameters` (theta included); older files have rope_theta + rope_scaling.
    rope_key = "rope_parameters" if hf.get("rope_parameters") else "rope_scaling"
    rope = dict(hf.get(rope_key) or {})
    theta = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    scaling = None
    if rope_type == "llama3":
        scaling = RopeScaling(factor=float(rope["factor"]), low_freq_factor=float(rope["low_freq_factor"]),
                              high_freq_factor=float(rope["high_freq_factor"]),
                              original_max_position_embeddings=int(rope["original_max_position_embeddings"]))
    elif rope_type != "default":
        raise CheckpointError(f"{source} {rope_key}: rope type {rope_type!r} is not supported (only default and "
                              "llama3)")
    heads = hf["num_attention_heads"]
    # Qwen3's head_dim defaults to 128 whatever the width; the others' to hidden_size / heads. Keep head_dim
    # unset when it is hidden_size / heads, so configs compare equal to the registry's.
    head_dim = hf.get("head_dim", 128 if family == "qwen3" else None)
    if head_dim == hf["hidden_size"] // heads and hf["hidden_size"] % heads == 0:
        head_dim = None
    return LlamaConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"], intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"], num_heads=heads, num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=head_dim, rope_theta=float(theta), rope_scaling=scaling,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)), tie_word_embeddings=bool(hf.get("tie_word_embeddings")),
        max_position_embeddings=int(hf.get("max_position_embeddings", 2048 if family == "llama" else 32768)),
        param_dtype=param_dtype, family=family)


def llama_to_hf_config(config: LlamaConfig, torch_dtype: str = "float32") -> dict:
    """The `config.json` dict of the HF model equal to `config` (`LlamaForCausalLM`, `Qwen2ForCausalLM` or
    `Qwen3ForCausalLM` by family; rope in both old and new spellings)."""
    rope: dict = {"rope_type": "default", "rope_theta": config.rope_theta}
    if config.rope_scaling is not None:
        s = config.rope_scaling
        rope.update(rope_type="llama3", factor=s.factor, low_freq_factor=s.low_freq_factor,
                    high_freq_factor=s.high_freq_factor,
                    original_max_position_embeddings=s.original_max_position_embeddings)
    hf = {
        "architectures": [HF_ARCHITECTURES[config.family][0]], "model_type": config.family,
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_size, "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps, "tie_word_embeddings": config.tie_word_embeddings,
        "max_position_embeddings": config.max_position_embeddings,
        # Older transformers read rope_theta/rope_scaling, newer read rope_parameters.
        "rope_theta": config.rope_theta,
        "rope_scaling": None if config.rope_scaling is None else {k: v for k, v in rope.items() if k != "rope_theta"},
        "rope_parameters": rope, "dtype": torch_dtype,
    }
    if config.family == "llama":
        hf.update(attention_bias=False, mlp_bias=False)
    else:  # Qwen: full attention in every layer (the q/k/v bias of qwen2 needs no key)
        hf.update(use_sliding_window=False, sliding_window=None, max_window_layers=config.num_layers,
                  layer_types=["full_attention"] * config.num_layers)
        if config.family == "qwen3":
            hf.update(attention_bias=False)
    return hf


@dataclasses.dataclass(frozen=True)
class LayerTensor:
    """One per-layer tensor: its HF name under `model.layers.{i}.`, its HF shape and ours, and how one maps to the
    other. `kind` says the layout: "heads_in" (HF [heads*d, e] -> ours [e, heads, d]), "heads_out" (HF
    [e, heads*d] -> ours [heads, d, e]), "linear" (HF [out, in] -> ours [in, out]) and "vector" (the same elements
    in the same order, reshaped only: norm scales [e] or [d], q/k/v biases HF [heads*d] -> ours [heads, d])."""

    hf_name: str
    hf_shape: tuple[int, ...]
    shape: tuple[int, ...]
    kind: str

    def to_ours(self, w: np.ndarray) -> np.ndarray:
        """HF layout -> ours (transposes and reshapes only: exact)."""
        return w.reshape(self.shape) if self.kind == "vector" else w.T.reshape(self.shape)

    def to_hf(self, p: np.ndarray) -> np.ndarray:
        """Ours -> HF layout (the inverse of `to_ours`)."""
        if self.kind == "vector":
            return p.reshape(self.hf_shape)
        return p.reshape(self.hf_shape[::-1]).T


def layer_tensors(c: LlamaConfig) -> dict[tuple[str, str], LayerTensor]:
    """Every per-layer tensor of `c`, keyed by our path under "layers" (group, leaf); the family's rows (Qwen3's
    q/k norm scales, Qwen2's q/k/v biases) only when `c` has them."""
    e, f, h, kv, d = c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_size
    table: dict[tuple[str, str], LayerTensor] = {
        ("self_attn", "q_proj"): LayerTensor("self_attn.q_proj.weight", (h * d, e), (e, h, d), "heads_in"),
        ("self_attn", "k_proj"): LayerTensor("self_attn.k_proj.weight", (kv * d, e), (e, kv, d), "heads_in"),
        ("self_attn", "v_proj"): LayerTensor("self_attn.v_proj.weight", (kv * d, e), (e, kv, d), "heads_in"),
        ("self_attn", "o_proj"): LayerTensor("self_attn.o_proj.weight", (e, h * d), (h, d, e), "heads_out"),
        ("mlp", "gate_proj"): LayerTensor("mlp.gate_proj.weight", (f, e), (e, f), "linear"),
        ("mlp", "up_proj"): LayerTensor("mlp.up_proj.weight", (f, e), (e, f), "linear"),
        ("mlp", "down_proj"): LayerTensor("mlp.down_proj.weight", (e, f), (f, e), "linear"),
        ("input_layernorm", "scale"): LayerTensor("input_layernorm.weight", (e,), (e,), "vector"),
        ("post_attention_layernorm", "scale"): LayerTensor("post_attention_layernorm.weight", (e,), (e,), "vector"),
    }
    if c.qkv_bias:
        for name, heads in (("q", h), ("k", kv), ("v", kv)):
            table[("self_attn", f"{name}_bias")] = LayerTensor(f"self_attn.{name}_proj.bias", (heads * d,),
                                                               (heads, d), "vector")
    if c.qk_norm:
        for name in ("q", "k"):
            table[("self_attn", f"{name}_norm_scale")] = LayerTensor(f"self_attn.{name}_norm.weight", (d,), (d,),
                                                                     "vector")
    return table


def checkpoint_tensors(c: LlamaConfig) -> list[TensorMap]:
    """Every parameter of `c` with the HF tensor(s) it is stored as: the embedding, each `layer_tensors` row stacked
    over the layers, the final norm and, untied, the head (HF [vocab, embed] -> ours [embed, vocab])."""
    e, v = c.hidden_size, c.vocab_size
    maps = [TensorMap(("embed_tokens",), ("model.embed_tokens.weight",), (v, e), (v, e), False, False)]
    for (group, leaf), t in layer_tensors(c).items():
        names = tuple(f"model.layers.{i}.{t.hf_name}" for i in range(c.num_layers))
        maps.append(TensorMap(("layers", group, leaf), names, t.hf_shape, t.shape, t.kind != "vector", True))
    maps.append(TensorMap(("norm", "scale"), ("model.norm.weight",), (e,), (e,), False, False))
    # Tied checkpoints may or may not carry a (duplicate) lm_head.weight; the embedding is the head either way.
    if not c.tie_word_embeddings:
        maps.append(TensorMap(("lm_head",), ("lm_head.weight",), (v, e), (e, v), True, False))
    return maps


def load_hf(hf_dir: str | os.PathLike, param_dtype: str = "float32", shardings: Any = None,
            reader: CheckpointReader | None = None, read: str = "auto") -> tuple[LlamaConfig, dict]:
    """Read an HF checkpoint directory (Llama, Qwen2, Qwen3) into (config, params) with params cast to `param_dtype`.

    Each parameter is read straight into its entry of `shardings` (a tree like the params of
    `jax.sharding.Sharding`, e.g. `sharding.param_shardings(config, mesh, rules)`; None: this process's first
    device), shard by shard: a process reads only the slices its own devices hold, and the host holds one shard
    and the slice it is being read from at a time, never the model (`hf_stream`, `hf_load`). `reader`, a
    `CheckpointReader` of `hf_dir`, counts the bytes read. `read` ("auto", "direct", "rows";
    `hf_load.read_sharding`): with FSDP across processes "auto" reads whole rows split between them and
    reshards on device, so each process reads its share of the files from storage, not every page of them.

    Raises:
      CheckpointError: config.json missing or unparsable, another architecture, a missing tensor (named), or a
        shape mismatch (file, tensor, expected, got), before anything is read.
    """
    hf_dir = pathlib.Path(hf_dir)
    config = hf_config_to_llama(read_hf_config(hf_dir), param_dtype, source=str(hf_dir / "config.json"))
    params = load_tensors(reader or CheckpointReader(hf_dir), checkpoint_tensors(config), jnp.dtype(param_dtype),
                          shardings, read)
    return config, params


def save_hf(config: LlamaConfig, params: dict, out_dir: str | os.PathLike,
            max_shard_bytes: int = 5 * 1024 ** 3) -> pathlib.Path:
    """Write params as an HF directory (config.json + safetensors, sharded with an index above
    `max_shard_bytes`) that `transformers.AutoModelForCausalLM.from_pretrained` loads. Returns `out_dir`.

    `params` are host arrays or global jax.Arrays on any mesh, multi-process included: each HF tensor is written by
    a process that holds it (or gathers that one tensor), into its own files, so no process holds the model
    (`hf_write.save_tensors`). In a multi-process run every process calls it, with `out_dir` on a shared disk.
    """
    out = pathlib.Path(out_dir)
    dtypes = {np.dtype(x.dtype).name for x in jax.tree.leaves(params)}
    torch_dtype = dtypes.pop() if len(dtypes) == 1 else "float32"
    meta = {"format": "pt"}  # transformers refuses safetensors without this metadata
    save_tensors(checkpoint_tensors(config), params, out, max_shard_bytes, meta)
    if jax.process_index() == 0:
        (out / "config.json").write_text(json.dumps(llama_to_hf_config(config, torch_dtype), indent=2))
    return out


def gguf_to_hf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> pathlib.Path:
    """Dequantize a llama.cpp GGUF file (through transformers) into an HF directory with its tokenizer.

    Raises FileNotFoundError for a missing file and CheckpointError for a file that is not a readable GGUF.
    """
    import safetensors.torch
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    path = pathlib.Path(gguf_path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {path} does not exist")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise CheckpointError(f"{path} is not a GGUF file (starts with {magic!r}, expected b'GGUF')")
    try:
        model = LlamaForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as err:  # transformers raises many types for truncated/corrupt files; name the file
        raise CheckpointError(f"cannot read GGUF file {path}: {type(err).__name__}: {err}") from err
    hf = model.config.to_dict()
    if hf_config_to_llama(hf, source=str(path)).family != "llama":  # fail here, not later, for a non-Llama GGUF
        raise CheckpointError(f"{path}: model_type={hf.get('model_type')!r}; only Llama GGUF files are converted")
    out = pathlib.Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # shares storage with the embedding; safetensors refuses shared tensors
    safetensors.torch.save_file(state, out / SINGLE_FILE, metadata={"format": "pt"})
    # The weights are now plain fp32: drop the GGUF quantization entry, or transformers would re-quantize.
    hf.pop("quantization_config", None)
    hf["architectures"] = ["LlamaForCausalLM"]
    hf["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(hf, indent=2))
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
