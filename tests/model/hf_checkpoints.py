"""The checkpoints and counters the streamed HF loading tests share (test_hf_stream_layouts.py,
test_hf_stream_reads.py and test_hf_stream_multihost.py): a checkpoint's tensors and our params read from its whole
files (the reference), the suite's FSDP shardings, a random checkpoint written with safetensors itself, and the
bytes a process has read from storage out of an uncached copy. No torch here: the memory test's and the multihost
test's child processes import this module."""

from __future__ import annotations

import json
import os
import pathlib

import jax
import numpy as np
from jax.sharding import Mesh
from safetensors.numpy import load_file, save_file

from swerl_jax import sharding
from swerl_jax.meshes import AXES
from swerl_jax.model.convert import hf_config_to_llama, layer_tensors


def checkpoint_state(hf_dir: pathlib.Path) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint in `hf_dir`, read whole from its safetensors files, by HF name."""
    return {k: v for f in sorted(hf_dir.glob("*.safetensors")) for k, v in load_file(f).items()}


def reference(hf_dir: pathlib.Path) -> dict:
    """Our params from the whole files, through the table's own `LayerTensor.to_ours` (not the slice mapping)."""
    cfg = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
    state = checkpoint_state(hf_dir)
    layers: dict = {}
    for (group, leaf), t in layer_tensors(cfg).items():
        layers.setdefault(group, {})[leaf] = np.stack([t.to_ours(state[f"model.layers.{i}.{t.hf_name}"])
                                                       for i in range(cfg.num_layers)])
    params = {"embed_tokens": state["model.embed_tokens.weight"], "layers": layers,
              "norm": {"scale": state["model.norm.weight"]}}
    if not cfg.tie_word_embeddings:
        params["lm_head"] = state["lm_head.weight"].T
    return params


def fsdp_shardings(cfg, devices: int = 8):
    """The suite's FSDP param shardings of `cfg` over the first `devices` CPU devices (mesh 1 x devices x 1)."""
    mesh = Mesh(np.asarray(jax.devices()[:devices]).reshape(1, devices, 1), AXES)
    return sharding.param_shardings(cfg, mesh)


def read_bytes() -> int:
    """The bytes this process has had read from storage so far (`/proc/self/io` read_bytes: page-cache hits and
    mapped pages already resident do not count, readahead does)."""
    io = pathlib.Path("/proc/self/io").read_text()
    return int(next(line.split()[1] for line in io.splitlines() if line.startswith("read_bytes:")))


def private_copy(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    """A copy of checkpoint `src` at `dst` whose pages are on disk and not in the page cache (written, fsync'ed,
    then dropped with posix_fadvise DONTNEED): loading it reads from storage what a host without the files
    cached would. No root needed, unlike /proc/sys/vm/drop_caches, and other processes' caches are untouched."""
    dst.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        fd = os.open(dst / f.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return dst


def write_random_checkpoint(out: pathlib.Path, cfg, files: int = 2) -> int:
    """Random fp32 HF tensors of `cfg` written with safetensors itself in `files` shards + index; their bytes."""
    from swerl_jax.model.convert import checkpoint_tensors, llama_to_hf_config

    rng = np.random.default_rng(0)
    names = [(n, m.hf_shape) for m in checkpoint_tensors(cfg) for n in m.hf_names]
    out.mkdir(parents=True)
    weight_map, total = {}, 0
    for k in range(files):
        fname = f"model-{k + 1:05d}-of-{files:05d}.safetensors"
        part = {n: rng.standard_normal(shape, dtype=np.float32) for n, shape in names[k::files]}
        save_file(part, out / fname, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, fname))
        total += sum(v.nbytes for v in part.values())
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (out / "config.json").write_text(json.dumps(llama_to_hf_config(cfg)))
    return total
