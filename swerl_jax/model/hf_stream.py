"""Hugging Face safetensors checkpoints read slice by slice, straight into the target sharding.

Every parameter is built shard by shard on the devices that hold it. For one shard (a tuple of slices over our
[layers, ...] shape) each layer in its layer range is read from the file as only the rows and columns that land
in the shard (`hf_index`), then transposed and reshaped into our layout and cast. A process reads only what its
own devices hold, a shard held by several of its devices is read once, and the host holds one shard plus one
slice at a time, never the model. Which layout a leaf is read in, and the reshard to its target, is `hf_load`
(`load_tensors`); writing is `hf_write`. Row blocks and headers are read with `pread` and readahead off: a
process reads from storage the bytes it asked for, not the next 8 MiB as well.

How one parameter maps to the file is a `TensorMap`: its HF name (one per layer when stacked), the HF shape,
our per-layer shape and whether ours is the HF tensor transposed (torch Linear [out, in] -> ours [in, out])
before the reshape that splits heads out. Which tensors a model has is `convert.checkpoint_tensors`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
from safetensors import safe_open

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

Index = tuple[slice, ...]

# safetensors dtype codes that the row reader maps itself (others go through safetensors' slicing)
_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


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


def read_header(path: pathlib.Path) -> tuple[int, dict]:
    """(the offset where the data of safetensors file `path` starts, its JSON header: name -> dtype, shape,
    data_offsets). Read with readahead off: safetensors' own `safe_open` maps the file, and touching its header
    page faults in the next 8 MiB of tensors (the kernel's read-around) on every process."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        n = int.from_bytes(os.pread(fd, 8, 0), "little")
        # A cut download's first 8 bytes can claim any length: never ask pread for more than the file holds.
        if n > os.fstat(fd).st_size - 8:
            raise CheckpointError(f"{path} is not a safetensors file (its header claims {n} bytes, past the "
                                  "file's end: truncated or foreign)")
        text = os.pread(fd, n, 8)
    finally:
        os.close(fd)
    try:
        header = json.loads(text)
    except ValueError as e:
        raise CheckpointError(f"{path} is not a safetensors file (its header does not parse: {e})") from None
    if not isinstance(header, dict) or len(text) != n:
        raise CheckpointError(f"{path} is not a safetensors file (truncated or foreign header)")
    header.pop("__metadata__", None)
    return 8 + n, header


def read_hf_config(hf_dir: str | os.PathLike) -> dict:
    """The JSON object in `hf_dir`/config.json; CheckpointError, one line naming the file, when it is missing,
    unreadable or not a JSON object (a broken download), instead of an OSError or JSONDecodeError traceback."""
    path = pathlib.Path(hf_dir) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist: {path.parent} is not a Hugging Face model directory")
    try:
        hf = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path} does not parse as JSON ({e}): a truncated or broken download?") from None
    if not isinstance(hf, dict):
        raise CheckpointError(f"{path} does not parse as a JSON object (got {type(hf).__name__})")
    return hf


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
        files.update(dict.fromkeys(read_header(path)[1], path))
    return files


class CheckpointReader:
    """Reads slices of named tensors from one checkpoint directory, counting the bytes it returns.

    Each read opens the file, takes the slice and closes it again, so the mapped pages of one tensor at most are
    resident at a time. A block of whole rows is read with `pread` (readahead off: storage reads exactly those
    bytes, nothing is mapped); any other slice through safetensors' mapped slicing. Names are the full HF names;
    checkpoints saved from `LlamaModel` (no "model." prefix on any tensor) are read under the same names.
    """

    def __init__(self, hf_dir: str | pathlib.Path):
        self.hf_dir = pathlib.Path(hf_dir)
        self.files = tensor_files(self.hf_dir)
        self.prefixed = any(n.startswith("model.") for n in self.files)
        self.bytes_read = 0
        self._headers: dict[pathlib.Path, tuple[int, dict]] = {}

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
        entry = self.header(path)[1].get(key)
        got = None if entry is None else tuple(entry["shape"])
        if got is None:
            raise CheckpointError(f"{self.hf_dir / INDEX_FILE} puts tensor {key!r} in {path.name}, which does not "
                                  "hold it")
        if got != tuple(shape):
            raise CheckpointError(f"tensor {key!r} in {path.name} has shape {list(got)}, expected {list(shape)} "
                                  "from config.json")

    def header(self, path: pathlib.Path) -> tuple[int, dict]:
        """`read_header` of `path`, read once per file."""
        if path not in self._headers:
            self._headers[path] = read_header(path)
        return self._headers[path]

    def rows(self, name: str, index: Index) -> tuple[pathlib.Path, int, int, np.dtype, tuple[int, ...]] | None:
        """(file, offset, length, dtype, shape) of the bytes of slice `index` of tensor `name` when it is a block
        of whole rows in a dtype read by `pread`; None otherwise."""
        key = self.key(name)
        path = self.files[key]
        start, header = self.header(path)
        entry = header[key]
        shape = tuple(entry["shape"])
        lo, hi, step = index[0].indices(shape[0]) if shape and len(index) == len(shape) else (0, 0, 0)
        if step != 1 or entry["dtype"] not in _DTYPES or any(
                s.indices(n) != (0, n, 1) for s, n in zip(index[1:], shape[1:], strict=True)):
            return None
        dtype = np.dtype(_DTYPES[entry["dtype"]])
        row_bytes = dtype.itemsize * math.prod(shape[1:])
        return path, start + entry["data_offsets"][0] + lo * row_bytes, max(hi - lo, 0) * row_bytes, dtype, \
            (max(hi - lo, 0), *shape[1:])

    def prefetch(self, name: str, index: Index) -> None:
        """Start reading slice `index` of tensor `name` from storage in the background when it is a block of
        rows (exactly its bytes: readahead is off for the reads themselves, which would otherwise each wait)."""
        block = self.rows(name, index)
        if block is not None:
            fd = os.open(block[0], os.O_RDONLY)
            try:
                os.posix_fadvise(fd, block[1], block[2], os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)

    def read(self, name: str, index: Index) -> np.ndarray:
        """The slice `index` of tensor `name`, in the file's dtype (bf16 stays bf16, exactly)."""
        block = self.rows(name, index)
        if block is not None:
            part = _pread(*block)
        else:
            key = self.key(name)
            path = self.files[key]
            with safe_open(path, framework="numpy") as f:
                part = f.get_slice(key)[index]
        self.bytes_read += part.nbytes
        return part


def _pread(path: pathlib.Path, offset: int, length: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The `length` bytes at `offset` in `path` as a little-endian array of `dtype` shaped `shape`."""
    out = np.empty(shape, dtype.newbyteorder("<"))
    view, pos = memoryview(out.reshape(-1).view(np.uint8)), offset
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead past the block (8 MiB on this VM)
        while len(view):  # one pread returns at most ~2 GiB
            n = os.preadv(fd, [view], pos)
            if n <= 0:
                raise CheckpointError(f"{path} ends inside a tensor (truncated file?)")
            view, pos = view[n:], pos + n
    finally:
        os.close(fd)
    return out


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
    layers = range(*index[0].indices(m.leaf_shape[0]))
    for k, layer in enumerate(layers):
        if k + 1 < len(layers):  # the next layer's rows come in while this one is copied
            reader.prefetch(m.hf_names[layers[k + 1]], hf_index(m, index[1:])[0])
        out[k] = _read_layer(reader, m, m.hf_names[layer], index[1:])  # the cast happens in the assignment
    return out


def index_key(index: Index, shape: Sequence[int]) -> tuple:
    """A hashable form of a shard index ((start, stop) per axis): shards with equal keys hold the same data."""
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))


def row_axis(m: TensorMap) -> int:
    """Our leaf axis (layers first when stacked) whose slices are blocks of the HF tensor's rows (its axis 0)."""
    t_shape = m.hf_shape[::-1] if m.transposed else m.hf_shape
    groups = _groups(t_shape, m.shape)
    return (groups[-1] if m.transposed else groups[0])[0] + int(m.stacked)


def leaf_at(tree: Any, path: tuple[str, ...], what: str) -> Any:
    """The entry of nested dicts `tree` at `path`; KeyError naming `what` and the path when absent."""
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            raise KeyError(f"{what} has no entry for params/{'/'.join(path)}")
        tree = tree[key]
    return tree
