"""Hugging Face checkpoints <-> swerl_jax params.

An HF Llama directory is `config.json` + safetensors (one `model.safetensors`, or shards listed in
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

import jax.numpy as jnp
import numpy as np
from safetensors import safe_open
from safetensors.flax import save_file

from swerl_jax.model.config import LlamaConfig, RopeScaling

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
class CheckpointError(ValueError):
    """A checkpoint that cannot be converted: wrong architecture, missing tensors, mismatched shapes."""


def require_hf_dir(path: str | os.PathLike, what: str = "hf_dir") -> pathlib.Path:
    """`path` as a Hugging Face model folder (a config.json with a `model_type`), or FileNotFoundError naming it:
    a run's folder (whose config.json is the experiment's) becomes one with `python -m swerl_jax.eval export`."""
    folder = pathlib.Path(path)
    if str(path) == "smollm2":  # the packaged model's name (`smollm2.resolve_hf_dir`), converted on first use
        return folder
    try:
        hf = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        hf = {}
    if not isinstance(hf, dict) or "model_type" not in hf:
        raise FileNotFoundError(f"{what}={path}: not a Hugging Face model folder (no config.json with a model_type); "
                                "a run's checkpoint becomes one with python -m swerl_jax.eval export")
    return folder


def hf_config_to_llama(hf: dict, param_dtype: str = "float32") -> LlamaConfig:
    """Our `LlamaConfig` from an HF `config.json` dict; raises CheckpointError for anything but a Llama decoder."""
    model_type = hf.get("model_type")
    archs = hf.get("architectures") or []
    if model_type != "llama" or any(a not in ("LlamaForCausalLM", "LlamaModel") for a in archs):
        raise CheckpointError(
            f"config.json describes model_type={model_type!r} architectures={archs}; only Llama decoders "
            "(model_type 'llama', LlamaForCausalLM) can be converted")
    for key, want in (("hidden_act", "silu"), ("attention_bias", False), ("mlp_bias", False)):
        if hf.get(key, want) != want:
            raise CheckpointError(f"config.json {key}={hf[key]!r} is not supported (Llama 3 uses {want!r})")
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads") if k not in hf]
    if missing:
        raise CheckpointError(f"config.json lacks required keys: {', '.join(missing)}")
    # transformers >= 5 writes `rope_parameters` (theta included); older files have rope_theta + rope_scaling.
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    scaling = None
    if rope_type == "llama3":
        scaling = RopeScaling(factor=float(rope["factor"]), low_freq_factor=float(rope["low_freq_factor"]),
                              high_freq_factor=float(rope["high_freq_factor"]),
                              original_max_position_embeddings=int(rope["original_max_position_embeddings"]))
    elif rope_type != "default":
        raise CheckpointError(f"config.json rope type {rope_type!r} is not supported (only default and llama3)")
    heads = hf["num_attention_heads"]
    # Keep head_dim unset when it is the default, so configs compare equal to the registry's.
    head_dim = hf.get("head_dim")
    if head_dim == hf["hidden_size"] // heads and hf["hidden_size"] % heads == 0:
        head_dim = None
    return LlamaConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"], intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"], num_heads=heads, num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=head_dim, rope_theta=float(theta), rope_scaling=scaling,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)), tie_word_embeddings=bool(hf.get("tie_word_embeddings")),
        max_position_embeddings=int(hf.get("max_position_embeddings", 2048)), param_dtype=param_dtype)


def llama_to_hf_config(config: LlamaConfig, torch_dtype: str = "float32") -> dict:
    """The `config.json` dict of a `LlamaForCausalLM` equal to `config` (rope in both old and new spellings)."""
    rope: dict = {"rope_type": "default", "rope_theta": config.rope_theta}
    if config.rope_scaling is not None:
        s = config.rope_scaling
        rope.update(rope_type="llama3", factor=s.factor, low_freq_factor=s.low_freq_factor,
                    high_freq_factor=s.high_freq_factor,
                    original_max_position_embeddings=s.original_max_position_embeddings)
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_size, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "rms_norm_eps": config.rms_norm_eps, "tie_word_embeddings": config.tie_word_embeddings,
        "max_position_embeddings": config.max_position_embeddings,
        # Older transformers read rope_theta/rope_scaling, newer read rope_parameters.
        "rope_theta": config.rope_theta,
        "rope_scaling": None if config.rope_scaling is None else {k: v for k, v in rope.items() if k != "rope_theta"},
        "rope_parameters": rope, "dtype": torch_dtype,
    }


def _tensor_files(hf_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    """Map every tensor name to the safetensors file that holds it."""
    index = hf_dir / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = {name: hf_dir / fname for name, fname in weight_map.items()}
        for path in sorted(set(files.values())):
            if not path.is_file():
                raise CheckpointError(f"{index} lists shard {path.name}, which is missing from {hf_dir}")
        return files
    paths = [hf_dir / SINGLE_FILE] if (hf_dir / SINGLE_FILE).is_file() else sorted(hf_dir.glob("*.safetensors"))
    if not paths:
        raise CheckpointError(f"{hf_dir} has no {SINGLE_FILE}, {INDEX_FILE} or other *.safetensors file")
    files = {}
    for path in paths:
        with safe_open(path, framework="flax") as f:
            files.update({name: path for name in f.keys()})
    return files


class _Reader:
    """Reads named tensors (checking shapes before loading) from the files of one checkpoint."""

    def __init__(self, files: dict[str, pathlib.Path], hf_dir: pathlib.Path):
        self.files, self.hf_dir = files, hf_dir
        # Checkpoints saved from LlamaModel have no "model." prefix.
        self.prefix = "model." if any(n.startswith("model.") for n in files) else ""

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        full = name if name == "lm_head.weight" else self.prefix + name
        if full not in self.files:
            raise CheckpointError(f"checkpoint {self.hf_dir} is missing tensor {full!r}")
        with safe_open(self.files[full], framework="flax") as f:
            got = tuple(f.get_slice(full).get_shape())
            if got != shape:
                raise CheckpointError(
                    f"tensor {full!r} in {self.files[full].name} has shape {list(got)}, expected {list(shape)} "
                    "from config.json")
            # np.asarray keeps bf16 (ml_dtypes) exactly; transposes happen on host memory.
            return np.asarray(f.get_tensor(full))


@dataclasses.dataclass(frozen=True)
class LayerTensor:
    """One per-layer tensor: its HF name under `model.layers.{i}.`, its HF shape and ours, and how one maps to the
    other. `kind` says the layout: "heads_in" (HF [heads*d, e] -> ours [e, heads, d]), "heads_out" (HF
    [e, heads*d] -> ours [heads, d, e]), "linear" (HF [out, in] -> ours [in, out]) and "vector" (the same)."""

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
    """Every per-layer tensor of `c`, keyed by our path under "layers" (group, leaf)."""
    e, f, h, kv, d = c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_size
    return {
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


def load_hf(hf_dir: str | os.PathLike, param_dtype: str = "float32") -> tuple[LlamaConfig, dict]:
    """Read an HF Llama checkpoint directory into (config, params) with params cast to `param_dtype`.

    Raises:
      FileNotFoundError: `hf_dir` or its config.json is missing.
      CheckpointError: another architecture, a missing tensor (named), or a shape mismatch (tensor, expected, got).
    """
    hf_dir = pathlib.Path(hf_dir)
    if not (hf_dir / "config.json").is_file():
        raise FileNotFoundError(f"{hf_dir / 'config.json'} does not exist: not a Hugging Face model directory")
    config = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()), param_dtype)
    reader = _Reader(_tensor_files(hf_dir), hf_dir)
    dt = jnp.dtype(param_dtype)
    e, v = config.hidden_size, config.vocab_size

    def cast(x: np.ndarray) -> jnp.ndarray:
        return jnp.asarray(x.astype(dt))

    layers: dict = {}
    for (group, leaf), t in layer_tensors(config).items():
        stacked = np.stack([t.to_ours(reader.get(f"layers.{i}.{t.hf_name}", t.hf_shape))
                            for i in range(config.num_layers)])
        layers.setdefault(group, {})[leaf] = cast(stacked)
    params = {"embed_tokens": cast(reader.get("embed_tokens.weight", (v, e))), "layers": layers,
              "norm": {"scale": cast(reader.get("norm.weight", (e,)))}}
    # Tied checkpoints may or may not carry a (duplicate) lm_head.weight; the embedding is the head either way.
    if not config.tie_word_embeddings:
        params["lm_head"] = cast(reader.get("lm_head.weight", (v, e)).T)
    return config, params


def params_to_hf_state(config: LlamaConfig, params: dict) -> dict[str, np.ndarray]:
    """HF `LlamaForCausalLM` state dict (numpy, params' dtype) of our params; no lm_head when tied."""
    state = {"model.embed_tokens.weight": np.asarray(params["embed_tokens"]),
             "model.norm.weight": np.asarray(params["norm"]["scale"])}
    for (group, leaf), t in layer_tensors(config).items():
        stacked = np.asarray(params["layers"][group][leaf])
        if stacked.shape[0] != config.num_layers:
            raise CheckpointError(f"params layers/{group}/{leaf} has {stacked.shape[0]} layers, config says "
                                  f"{config.num_layers}")
        for i in range(config.num_layers):
            state[f"model.layers.{i}.{t.hf_name}"] = np.ascontiguousarray(t.to_hf(stacked[i]))
    if not config.tie_word_embeddings:
        state["lm_head.weight"] = np.ascontiguousarray(np.asarray(params["lm_head"]).T)
    return state


def save_hf(config: LlamaConfig, params: dict, out_dir: str | os.PathLike,
            max_shard_bytes: int = 5 * 1024 ** 3) -> pathlib.Path:
    """Write params as an HF directory (config.json + safetensors, sharded with an index above
    `max_shard_bytes`) that `transformers.LlamaForCausalLM.from_pretrained` loads. Returns `out_dir`."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = params_to_hf_state(config, params)
    dtypes = {str(a.dtype) for a in state.values()}
    torch_dtype = dtypes.pop() if len(dtypes) == 1 else "float32"
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, arr in state.items():
        if shards[-1] and size + arr.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = arr
        size += arr.nbytes
    for stale in list(out.glob("*.safetensors")) + [out / INDEX_FILE]:
        stale.unlink(missing_ok=True)
    meta = {"format": "pt"}  # transformers refuses safetensors without this metadata
    if len(shards) == 1:
        save_file({k: jnp.asarray(a) for k, a in shards[0].items()}, out / SINGLE_FILE, metadata=meta)
    else:
        weight_map = {}
        for n, shard in enumerate(shards, 1):
            fname = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
            save_file({k: jnp.asarray(a) for k, a in shard.items()}, out / fname, metadata=meta)
            weight_map.update({k: fname for k in shard})
        total = sum(a.nbytes for a in state.values())
        (out / INDEX_FILE).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                                 indent=2))
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
    hf_config_to_llama(hf)  # fail here, not later, for a non-Llama GGUF
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
