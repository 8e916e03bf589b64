"""Hugging Face safetensors checkpoints read slice by slice, straight into the target sharding.

Every parameter is built shard by shard on the devices that hold it. For one shard (a tuple of slices over our
[layers, ...] shape) each layer in its layer range is read from the file as only the rows and columns that land
in the shard (`hf_index`), then transposed and reshaped into our layout and cast. A process reads only what its
own devices hold, a shard held by several of its devices is read once, and the host holds one shard plus one
slice at a time, never the model. Writing is `hf_write`.

How one parameter maps to the file is a `TensorMap`: its HF name (one per layer when stacked), the HF shape,
our per-layer shape and whether ours is the HF tensor transposed (torch Linear [out, in] -> ours [in, out])
before the reshape that splits heads out. Which tensors a model has is `convert.checkpoint_tensors`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Sharding
from safetensors import safe_open

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

Index = tuple[slice, ...]


class CheckpointError(ValueError):
    """A checkpoint that cannot be converted: wrong architecture, missing tensors, mismatched shapes."""


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """One parameter leaf (`path` in the params tree) and the HF tensor(s) it is read from and written to."""

    path: tuple[str, ...]
    hf_names: tuple[str, ...]  # full names ("model.layers.3.mlp.up_proj.weight"); one per layer when stacked
    hf_shape: tuple[int, ...]
    shape: tuple[int, ...]  # ours, per layer
    transposed: bool  # ours = hf.T.reshape(shape) (projections) rather than hf.reshape(shape) (vectors, embedding)
    stacked: bool  # the leaf is [layers, *shape], one HF tensor per layer

    @property
    def leaf_shape(self) -> tuple[int, ...]:
        """The shape of the whole leaf (layers first when stacked)."""
        return (len(self.hf_names), *self.shape) if self.stacked else self.shape


def tensor_files(hf_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    """Map every tensor name (as stored) to the safetensors file that holds it; CheckpointError names a missing
    shard or a directory without weights."""
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
        with safe_open(path, framework="numpy") as f:
            files.update({name: path for name in f.keys()})
    return files


class CheckpointReader:
    """Reads slices of named tensors from one checkpoint directory, counting the bytes it returns.

    Each read opens the file, takes the slice and closes it again, so the mapped pages of one tensor at most are
    resident at a time. Names are the full HF names; checkpoints saved from `LlamaModel` (no "model." prefix on
    any tensor) are read under the same names.
    """

    def __init__(self, hf_dir: str | pathlib.Path):
        self.hf_dir = pathlib.Path(hf_dir)
        self.files = tensor_files(self.hf_dir)
        self.prefixed = any(n.startswith("model.") for n in self.files)
        self.bytes_read = 0
        self._shapes: dict[pathlib.Path, dict[str, tuple[int, ...]]] = {}

    def key(self, name: str) -> str:
        """The stored key of the full HF name `name`."""
        return name if self.prefixed or not name.startswith("model.") else name.removeprefix("model.")

    def check(self, name: str, shape: tuple[int, ...]) -> None:
        """Raise CheckpointError naming the file and key when `name` is absent or not shaped `shape`."""
        key = self.key(name)
        if key not in self.files:
            where = INDEX_FILE if (self.hf_dir / INDEX_FILE).is_file() else \
                ", ".join(sorted({p.name for p in self.files.values()}))
            raise CheckpointError(f"checkpoint {self.hf_dir} is missing tensor {key!r} (not in {where})")
        path = self.files[key]
        if path not in self._shapes:  # one header read per file
            with safe_open(path, framework="numpy") as f:
                self._shapes[path] = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        got = self._shapes[path].get(key)
        if got is None:
            raise CheckpointError(f"{self.hf_dir / INDEX_FILE} puts tensor {key!r} in {path.name}, which does not "
                                  "hold it")
        if got != tuple(shape):
            raise CheckpointError(f"tensor {key!r} in {path.name} has shape {list(got)}, expected {list(shape)} "
                                  "from config.json")

    def read(self, name: str, index: Index) -> np.ndarray:
        """The slice `index` of tensor `name`, in the file's dtype (bf16 stays bf16, exactly)."""
        key = self.key(name)
        with safe_open(self.files[key], framework="numpy") as f:
            part = f.get_slice(key)[index]
        self.bytes_read += part.nbytes
        return part


def _groups(t_shape: Sequence[int], shape: Sequence[int]) -> list[list[int]]:
    """Which of our axes each axis of the (transposed) HF tensor splits into: ours is a reshape of it."""
    groups, a = [], 0
    for n in t_shape:
        group, size = [], 1
        while a < len(shape) and (not group or size < n):
            group.append(a)
            size *= shape[a]
            a += 1
        if size != n:
            raise ValueError(f"our shape {tuple(shape)} is not a reshape of {tuple(t_shape)}")
        groups.append(group)
    if any(n != 1 for n in shape[a:]):
        raise ValueError(f"our shape {tuple(shape)} is not a reshape of {tuple(t_shape)}")
    groups[-1] += list(range(a, len(shape)))  # trailing size-1 axes, if any
    return groups


def hf_index(m: TensorMap, index: Index) -> tuple[Index, tuple[int, ...], Index]:
    """(slice of the HF tensor to read, the shape its (transposed) rows reshape to, the slice of that to keep)
    for the slice `index` of one layer of `m` in our layout.

    An HF axis that splits into several of ours (heads x head_dim) is read as whole blocks of its first one (the
    heads the shard covers); the other axes' slices are taken after the reshape, which reads nothing extra when
    they are whole (heads sharded, head_dim not) and the covering rows when they are not.
    """
    t_shape = m.hf_shape[::-1] if m.transposed else m.hf_shape
    t_index, cover, keep = [], [], []
    for group in _groups(t_shape, m.shape):
        first, rest = group[0], group[1:]
        start, stop, step = index[first].indices(m.shape[first])
        if step != 1:
            raise ValueError(f"shard index {index} of {'/'.join(m.path)} has a stride")
        block = math.prod(m.shape[a] for a in rest)
        t_index.append(slice(start * block, stop * block))
        cover += [stop - start, *(m.shape[a] for a in rest)]
        keep += [slice(None), *(index[a] for a in rest)]
    return tuple(t_index[::-1] if m.transposed else t_index), tuple(cover), tuple(keep)


def _read_layer(reader: CheckpointReader, m: TensorMap, name: str, index: Index) -> np.ndarray:
    hf, cover, keep = hf_index(m, index)
    part = reader.read(name, hf)
    return (part.T if m.transposed else part).reshape(cover)[keep]


def shard_shape(shape: Sequence[int], index: Index) -> tuple[int, ...]:
    """The shape of the slice `index` of an array shaped `shape`."""
    return tuple(len(range(*s.indices(n))) for s, n in zip(index, shape, strict=True))


def read_shard(reader: CheckpointReader, m: TensorMap, index: Index, dtype: Any) -> np.ndarray:
    """The slice `index` of leaf `m` (layers first when stacked), read layer by layer and cast to `dtype`."""
    index = tuple(index) + (slice(None),) * (len(m.leaf_shape) - len(index))
    if not m.stacked:
        return np.asarray(_read_layer(reader, m, m.hf_names[0], index), dtype=dtype)
    out = np.empty(shard_shape(m.leaf_shape, index), dtype)
    for k, layer in enumerate(range(*index[0].indices(m.leaf_shape[0]))):
        out[k] = _read_layer(reader, m, m.hf_names[layer], index[1:])  # the cast happens in the assignment
    return out


def index_key(index: Index, shape: Sequence[int]) -> tuple:
    """A hashable form of a shard index ((start, stop) per axis): shards with equal keys hold the same data."""
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))


def load_leaf(reader: CheckpointReader, m: TensorMap, sharding: Sharding, dtype: Any) -> jax.Array:
    """Leaf `m` as a global array laid out by `sharding`: each distinct shard this process holds is read once
    and put on its devices before the next is read (`jax.make_array_from_callback` would hold them all)."""
    shape = m.leaf_shape
    placement = sharding.addressable_devices_indices_map(shape)
    groups: dict[tuple, tuple[Index, list]] = {}
    for device, index in placement.items():
        groups.setdefault(index_key(index, shape), (index, []))[1].append(device)
    arrays = {}
    for index, devices in groups.values():
        host = read_shard(reader, m, index, dtype)
        for device in devices:
            arrays[device] = jax.device_put(host, device)
        del host
    return jax.make_array_from_single_device_arrays(shape, sharding, [arrays[d] for d in placement])


def leaf_at(tree: Any, path: tuple[str, ...], what: str) -> Any:
    """The entry of nested dicts `tree` at `path`; KeyError naming `what` and the path when absent."""
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            raise KeyError(f"{what} has no entry for params/{'/'.join(path)}")
        tree = tree[key]
    return tree


def load_tensors(reader: CheckpointReader, maps: Sequence[TensorMap], dtype: Any,
                 shardings: Any = None) -> dict:
    """The params tree of `maps`, each leaf cast to `dtype` and laid out by its entry in `shardings` (a tree like
    the params of `jax.sharding.Sharding`; None: this process's first device).

    Every tensor's presence and shape is checked (file headers only) before anything is read.
    """
    for m in maps:
        for name in m.hf_names:
            reader.check(name, m.hf_shape)
    default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    params: dict = {}
    for m in maps:
        sharding = default if shardings is None else leaf_at(shardings, m.path, "shardings")
        node = params
        for key in m.path[:-1]:
            node = node.setdefault(key, {})
        node[m.path[-1]] = load_leaf(reader, m, sharding, dtype)
    return params
