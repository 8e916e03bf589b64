"""Params written as Hugging Face safetensors files from wherever their shards are, never gathered on one host.

Each HF tensor is written by one process, into files that processes write in parallel. A file goes to a process
whose devices hold all of its tensors whole (the least loaded such process), and that process assembles each
tensor from its own shards, one tensor at a time, streaming it into the file after a header computed from the
shapes alone. A tensor that no process holds whole (FSDP across hosts) is gathered to every process by a
collective that all of them join in the same order (one tensor at a time); its file's owner writes it. Process 0
clears stale files first and writes the index after a barrier. Which tensors a model has is a list of
`hf_stream.TensorMap`s (`convert.checkpoint_tensors`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import struct
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from swerl_jax.model.hf_stream import (
    INDEX_FILE,
    SINGLE_FILE,
    CheckpointError,
    TensorMap,
    index_key,
    leaf_at,
    shard_shape,
)

# numpy dtype name -> safetensors dtype tag (the format's own names)
_ST_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
              "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    m: TensorMap
    layer: int | None
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.m.hf_shape) * self.dtype.itemsize


def _holders(leaf: Any, layer: int | None) -> set[int]:
    """The processes whose devices hold the whole of `leaf[layer]` (`leaf` when layer is None)."""
    if not isinstance(leaf, jax.Array):
        return set(range(jax.process_count()))  # host arrays: every process has its own copy
    covered: dict[int, dict[tuple, int]] = {}
    for device, index in leaf.sharding.devices_indices_map(leaf.shape).items():
        if layer is not None:
            lo, hi, _ = index[0].indices(leaf.shape[0])
            if not lo <= layer < hi:
                continue
            index = index[1:]
        shape = leaf.shape[1:] if layer is not None else leaf.shape
        covered.setdefault(device.process_index, {})[index_key(index, shape)] = \
            math.prod(shard_shape(shape, index))
    whole = math.prod(leaf.shape[1:] if layer is not None else leaf.shape)
    return {p for p, parts in covered.items() if sum(parts.values()) == whole}  # distinct shards tile the array


# One layer of a shard, on its device: the layer is an argument, so one compile per shard shape and device, not per
# layer.
_take = jax.jit(lambda x, i: jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=False))


def _local_tensor(leaf: Any, layer: int | None) -> np.ndarray:
    """`leaf[layer]` on the host from this process's shards (each distinct one fetched once, one layer only)."""
    if not isinstance(leaf, jax.Array):
        return np.asarray(leaf if layer is None else leaf[layer])
    shape = leaf.shape[1:] if layer is not None else leaf.shape
    out = np.empty(shape, leaf.dtype)
    seen = set()
    for shard in leaf.addressable_shards:
        index = shard.index
        if layer is not None:
            lo, hi, _ = index[0].indices(leaf.shape[0])
            if not lo <= layer < hi:
                continue
            # A CPU device's buffer is host memory: a numpy view of it costs nothing. Elsewhere only the one layer
            # crosses to the host.
            index, data = index[1:], (np.asarray(shard.data)[layer - lo] if shard.device.platform == "cpu"
                                      else _take(shard.data, np.int32(layer - lo)))
        else:
            data = shard.data
        key = index_key(index, shape)
        if key not in seen:
            seen.add(key)
            out[index] = np.asarray(data)
    return out


class _Gather:
    """One tensor of a leaf replicated onto every device by a collective (all processes call it in step)."""

    def __init__(self) -> None:
        self._fns: dict = {}

    def __call__(self, leaf: jax.Array, layer: int | None) -> jax.Array:
        if not isinstance(leaf.sharding, NamedSharding):
            raise ValueError(f"a leaf split across processes must have a NamedSharding to be saved, got "
                             f"{leaf.sharding}")
        key = (leaf.sharding, layer is None)
        if key not in self._fns:
            out = NamedSharding(leaf.sharding.mesh, PartitionSpec())
            self._fns[key] = jax.jit(lambda x: x, out_shardings=out) if layer is None else \
                jax.jit(lambda x, i: jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=False), out_shardings=out)
        return self._fns[key](leaf) if layer is None else self._fns[key](leaf, np.int32(layer))


def _write_header(fh: Any, entries: Sequence[_Entry], metadata: dict[str, str]) -> None:
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for e in entries:
        if e.dtype.name not in _ST_DTYPES:
            raise CheckpointError(f"tensor {e.name!r}: dtype {e.dtype} has no safetensors encoding")
        header[e.name] = {"dtype": _ST_DTYPES[e.dtype.name], "shape": list(e.m.hf_shape),
                          "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    fh.write(struct.pack("<Q", len(raw)))
    fh.write(raw)


def _hf_layout(m: TensorMap, ours: np.ndarray) -> np.ndarray:
    """Our one-layer tensor in the HF layout (the inverse of the read's transpose and reshape), contiguous."""
    t_shape = m.hf_shape[::-1] if m.transposed else m.hf_shape
    t = ours.reshape(t_shape)
    return np.ascontiguousarray(t.T if m.transposed else t)


def save_tensors(maps: Sequence[TensorMap], params: dict, out: pathlib.Path, max_shard_bytes: int,
                 metadata: dict[str, str]) -> list[pathlib.Path]:
    """Write params (host arrays or global, possibly multi-process, jax.Arrays) as safetensors files under `out`
    (one `model.safetensors`, or shards of at most `max_shard_bytes` with an index), every process writing its
    own files; returns the files this process wrote. Every process must call it (it synchronises them)."""
    entries: list[_Entry] = []
    for m in maps:
        leaf = leaf_at(params, m.path, "params")
        if tuple(leaf.shape) != m.leaf_shape:
            raise CheckpointError(f"params/{'/'.join(m.path)} has shape {list(leaf.shape)}, the config says "
                                  f"{list(m.leaf_shape)}")
        for i, name in enumerate(m.hf_names):
            entries.append(_Entry(name, m, i if m.stacked else None, np.dtype(leaf.dtype)))
    files: list[list[_Entry]] = [[]]
    size = 0
    for e in entries:  # the same packing on every process
        if files[-1] and size + e.nbytes > max_shard_bytes:
            files.append([])
            size = 0
        files[-1].append(e)
        size += e.nbytes
    names = [SINGLE_FILE] if len(files) == 1 else \
        [f"model-{n:05d}-of-{len(files):05d}.safetensors" for n in range(1, len(files) + 1)]
    # Owner of each file: the least-loaded process that holds all of its tensors whole, else the least loaded.
    holders = {e.name: _holders(leaf_at(params, e.m.path, "params"), e.layer) for e in entries}
    load = [0] * jax.process_count()
    owners = []
    for tensors in files:
        can = set.intersection(*(holders[e.name] for e in tensors)) or set(range(len(load)))
        owner = min(sorted(can), key=lambda p: load[p])
        load[owner] += sum(e.nbytes for e in tensors)
        owners.append(owner)
    me = jax.process_index()
    if me == 0:
        out.mkdir(parents=True, exist_ok=True)
        for stale in [*out.glob("*.safetensors"), out / INDEX_FILE]:
            stale.unlink(missing_ok=True)
    _barrier("swerl_jax save_hf: folder ready")
    gather, written = _Gather(), []
    for fname, tensors, owner in zip(names, files, owners, strict=True):
        fh = open(out / fname, "wb") if owner == me else None  # noqa: SIM115 (closed below, written in a loop)
        try:
            if fh is not None:
                _write_header(fh, tensors, metadata)
            for e in tensors:
                leaf = leaf_at(params, e.m.path, "params")
                if owner in holders[e.name]:
                    if fh is None:
                        continue
                    ours = _local_tensor(leaf, e.layer)
                else:  # the writer does not hold it whole: every process joins the gather, the writer keeps it
                    full = gather(leaf, e.layer)
                    if fh is None:
                        continue
                    ours = np.asarray(full.addressable_data(0))
                fh.write(_hf_layout(e.m, ours).reshape(-1).view(np.uint8))
        finally:
            if fh is not None:
                fh.close()
                written.append(out / fname)
    _barrier("swerl_jax save_hf: files written")
    if me == 0 and len(files) > 1:
        weight_map = {e.name: fname for fname, tensors in zip(names, files, strict=True) for e in tensors}
        (out / INDEX_FILE).write_text(json.dumps({"metadata": {"total_size": sum(e.nbytes for e in entries)},
                                                  "weight_map": weight_map}, indent=2))
    return written


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)
