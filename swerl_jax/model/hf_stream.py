"""Hugging Face safetensors checkpoints read slice by slice, straight into the target sharding.

Every parameter is built shard by shard on the devices that hold it. For one shard (a tuple of slices over our
[layers, ...] shape) each layer in its layer range is read from the file as only the rows and columns that land
in the shard (`hf_index`), then transposed and reshaped into our layout and cast. A process reads only what its
own devices hold, a shard held by several of its devices is read once, and the host holds one shard plus one
slice at a time, never the model. Writing is `hf_write`.

Storage is read in rows: a shard that splits the file's contiguous last axis (FSDP splits the model axis, the HF
rows' axis of the embedding, head, q/k/v, gate and up) touches every page of the rows it covers, so every process
would read the whole file. When that is what the target sharding would make some process read (`read_sharding`),
the leaf is read in a layout of whole rows (or whole layers) split between the processes instead, and resharded
on device to the target (one collective per leaf). Row blocks are read with `pread` and readahead off, so a
process reads from storage the rows it asked for and not the next 8 MiB.

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

import jax
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding
from safetensors import safe_open

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

Index = tuple[slice, ...]

READS = ("auto", "direct", "rows")  # how load_tensors reads each leaf (`read_sharding`)
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

    def read(self, name: str, index: Index) -> np.ndarray:
        """The slice `index` of tensor `name`, in the file's dtype (bf16 stays bf16, exactly)."""
        key = self.key(name)
        path = self.files[key]
        start, header = self.header(path)
        entry = header[key]
        shape = tuple(entry["shape"])
        lo, hi, step = index[0].indices(shape[0]) if shape and len(index) == len(shape) else (0, 0, 0)
        if step == 1 and entry["dtype"] in _DTYPES and all(
                s.indices(n) == (0, n, 1) for s, n in zip(index[1:], shape[1:], strict=True)):
            part = _pread_rows(path, start + entry["data_offsets"][0], np.dtype(_DTYPES[entry["dtype"]]), shape,
                               (lo, hi))
        else:
            with safe_open(path, framework="numpy") as f:
                part = f.get_slice(key)[index]
        self.bytes_read += part.nbytes
        return part


def _pread_rows(path: pathlib.Path, offset: int, dtype: np.dtype, shape: tuple[int, ...],
                rows: tuple[int, int]) -> np.ndarray:
    """Rows [rows[0], rows[1]) of the C-ordered little-endian tensor `shape` stored at `offset` in `path`."""
    row_bytes = dtype.itemsize * math.prod(shape[1:])
    out = np.empty((max(rows[1] - rows[0], 0), *shape[1:]), dtype.newbyteorder("<"))
    view, pos = memoryview(out.reshape(-1).view(np.uint8)), offset + rows[0] * row_bytes
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
    for k, layer in enumerate(range(*index[0].indices(m.leaf_shape[0]))):
        out[k] = _read_layer(reader, m, m.hf_names[layer], index[1:])  # the cast happens in the assignment
    return out


def index_key(index: Index, shape: Sequence[int]) -> tuple:
    """A hashable form of a shard index ((start, stop) per axis): shards with equal keys hold the same data."""
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))


def _assemble(reader: CheckpointReader, m: TensorMap, sharding: Sharding, dtype: Any) -> jax.Array:
    """Leaf `m` laid out by `sharding`, each distinct shard of this process read once and put on its devices
    before the next is read (`jax.make_array_from_callback` would hold them all)."""
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


def row_axis(m: TensorMap) -> int:
    """Our leaf axis (layers first when stacked) whose slices are blocks of the HF tensor's rows (its axis 0)."""
    t_shape = m.hf_shape[::-1] if m.transposed else m.hf_shape
    groups = _groups(t_shape, m.shape)
    return (groups[-1] if m.transposed else groups[0])[0] + int(m.stacked)


def rows_sharding(m: TensorMap, sharding: NamedSharding) -> NamedSharding:
    """Leaf `m` split into whole layers and blocks of whole HF rows over `sharding`'s devices: first between the
    processes (as many ways as the layers x rows allow, whole layers preferred: each then reads whole tensors),
    then between each process's devices. A mesh of its own (devices by process), since the target's axes rarely
    divide the rows (the 70B's fsdp axis of 512 chips divides neither its 80 layers nor its 64 heads)."""
    devices = sorted(sharding.device_set, key=lambda d: (d.process_index, d.id))
    procs = len({d.process_index for d in devices})
    local = len(devices) // procs
    rows_at = row_axis(m)
    layers, rows = (m.leaf_shape[0] if m.stacked else 1), m.leaf_shape[rows_at]
    pa, pb = _split(procs, layers, rows)
    la, lb = _split(local, layers // pa, rows // pb)
    names = ("layers_p", "rows_p", "copies_p", "layers_l", "rows_l", "copies_l")
    grid = np.empty(len(devices), dtype=object)
    grid[:] = devices
    mesh = Mesh(grid.reshape(pa, pb, procs // (pa * pb), la, lb, local // (la * lb)), names)
    spec: list = [None] * len(m.leaf_shape)
    if m.stacked:
        spec[0] = ("layers_p", "layers_l")
    spec[rows_at] = ("rows_p", "rows_l")
    return NamedSharding(mesh, PartitionSpec(*spec))


def _split(n: int, layers: int, rows: int) -> tuple[int, int]:
    """(a, b): a divides `layers`, b divides `rows`, a * b divides `n` and is the largest such; then a largest."""
    pairs = [(a, b) for a in range(1, n + 1) if n % a == 0 and layers % a == 0
             for b in range(1, n // a + 1) if (n // a) % b == 0 and rows % b == 0]
    return max(pairs, key=lambda ab: (ab[0] * ab[1], ab[0]))


def rows_read(m: TensorMap, sharding: Sharding) -> tuple[int, bool]:
    """(the most HF rows, summed over layers, any one process touches in storage to read its shards of leaf `m`
    laid out by `sharding`; whether some shard splits the rows). A slice that splits a row touches all of its
    pages, so a row counts whole."""
    shape, n_rows = m.leaf_shape, m.hf_shape[0]
    # per process: {layer range: row ranges}; a NamedSharding's layer ranges are equal or disjoint
    spans: dict[int, dict[tuple[int, int], set[tuple[int, int]]]] = {}
    split = False
    for device, index in sharding.devices_indices_map(shape).items():
        layers = index[0].indices(shape[0])[:2] if m.stacked else (0, 1)
        hf = hf_index(m, index[1:] if m.stacked else index)[0]
        split = split or any(s.indices(n)[:2] != (0, n) for s, n in zip(hf[1:], m.hf_shape[1:], strict=True))
        spans.setdefault(device.process_index, {}).setdefault(layers, set()).add(hf[0].indices(n_rows)[:2])
    most = max(sum((hi - lo) * _union(ranges) for (lo, hi), ranges in per.items()) for per in spans.values())
    return most, split


def _union(ranges: set[tuple[int, int]]) -> int:
    """How many integers the half-open ranges cover together."""
    total, end = 0, None
    for lo, hi in sorted(ranges):
        lo = lo if end is None else max(lo, end)
        if hi > lo:
            total, end = total + hi - lo, hi
    return total


def read_sharding(m: TensorMap, sharding: Sharding, read: str = "auto") -> Sharding:
    """The layout leaf `m` is read in before it is put in `sharding`: `sharding` itself ("direct"), or whole rows
    or layers split between the processes (`rows_sharding`, "rows"). "auto" takes the rows layout across
    processes when it has some process read fewer rows from storage (FSDP across processes: every process reads
    every row otherwise), or as few and `sharding` splits rows (read through safetensors' mapping, where the
    kernel's read-around pulls in 8 MiB past each page touched). In one process: `sharding` (every byte is read
    either way, and the reshard would be a second copy). Every process decides alike: the leaf's reshard is a
    collective."""
    if read not in READS:
        raise ValueError(f"read={read!r}: expected one of {', '.join(READS)}")
    devices = sharding.device_set
    if read == "direct" or not isinstance(sharding, NamedSharding) or len(m.hf_shape) < 2 or \
            len(devices) % len({d.process_index for d in devices}):
        return sharding  # vectors (norms, biases): a few KB, read whole
    if read == "auto" and len({d.process_index for d in devices}) == 1:
        return sharding
    rows = rows_sharding(m, sharding)
    if read == "rows":
        return rows
    (got, _), (now, split) = rows_read(m, rows), rows_read(m, sharding)
    return rows if got < now or (got == now and split) else sharding


def load_leaf(reader: CheckpointReader, m: TensorMap, sharding: Sharding, dtype: Any, read: str = "auto") -> jax.Array:
    """Leaf `m` as a global array laid out by `sharding`: read in `read_sharding`'s layout, each distinct shard
    this process holds read once, and resharded on device when that layout is not `sharding`."""
    source = read_sharding(m, sharding, read)
    array = _assemble(reader, m, source, dtype)
    if source is sharding:
        return array
    # the read layout's mesh orders the devices by process, the target's by its axes: device_put reorders the
    # shards onto the target's device order, then reshards (collectives across processes)
    return jax.device_put(array, sharding, donate=True)


def leaf_at(tree: Any, path: tuple[str, ...], what: str) -> Any:
    """The entry of nested dicts `tree` at `path`; KeyError naming `what` and the path when absent."""
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            raise KeyError(f"{what} has no entry for params/{'/'.join(path)}")
        tree = tree[key]
    return tree


def load_tensors(reader: CheckpointReader, maps: Sequence[TensorMap], dtype: Any,
                 shardings: Any = None, read: str = "auto") -> dict:
    """The params tree of `maps`, each leaf cast to `dtype` and laid out by its entry in `shardings` (a tree like
    the params of `jax.sharding.Sharding`; None: this process's first device), read as `read` says
    (`read_sharding`).

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
        node[m.path[-1]] = load_leaf(reader, m, sharding, dtype, read)
    return params
