"""A checkpoint's tensors loaded into their target shardings (`load_tensors`), each leaf read in a layout chosen
for what it costs in storage reads (`read_sharding`), resharded on device when that is not the target.

Storage is read in rows: a shard that splits the file's contiguous last axis (FSDP splits the model axis, the
last axis of the embedding, head, q/k/v, gate and up in the files) touches every page of the rows it covers, so
with FSDP across processes every process would read the whole file. There (`read_sharding`) a leaf is read in a
layout of whole rows or whole layers split between the processes (`rows_sharding`) and resharded on device to
the target, a collective per leaf.

Measured (benchmarks/load_sharded_reads.py, BENCHMARKS.md "Loading and saving HF checkpoints, sharded"): with
two processes each reads half the files by the kernel's count, for XLA compiles of a few reshard programs; in
one process the direct layout is as fast and holds less, so one process reads straight into the target.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from swerl_jax.model.hf_stream import (
    CheckpointReader,
    Index,
    TensorMap,
    hf_index,
    index_key,
    leaf_at,
    read_shard,
    row_axis,
)

READS = ("auto", "direct", "rows")  # how load_tensors reads each leaf (`read_sharding`)


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


def rows_sharding(m: TensorMap, sharding: NamedSharding) -> NamedSharding:
    """`sharding` with its splits of leaf `m` moved onto whole HF rows (or whole layers): each mesh axis, cut
    into its prime factors (the 70B's fsdp axis of 512 chips divides neither its 80 layers nor its 64 heads, its
    factors of 2 do), that splits another axis of ours, or replicates across processes, moves to the row axis
    where it divides, else to the layer axis, else off the leaf (its devices read the same rows), those that span
    processes first. Same devices in the same order, so the reshard to `sharding` moves mesh axes between dims."""
    mesh = sharding.mesh
    procs = np.vectorize(lambda d: d.process_index, otypes=[int])(mesh.devices)
    names, sizes, spans, sub = [], [], {}, {}
    for i, (axis, n) in enumerate(mesh.shape.items()):
        sub[axis] = [f"{axis}:{k}" for k in range(len(_primes(n)))]
        names += sub[axis]
        sizes += _primes(n)
        along = np.moveaxis(procs, i, -1).reshape(-1, *_primes(n))
        for k, name in enumerate(sub[axis]):
            spans[name] = bool(np.any(np.diff(along, axis=k + 1)))
    refined = Mesh(mesh.devices.reshape(sizes or (1,)), tuple(names) or ("one",))
    size = dict(zip(names, sizes, strict=True))
    spec = [[b for a in ((e,) if isinstance(e, str) else e or ()) for b in sub[a]] for e in sharding.spec]
    spec += [[] for _ in range(len(m.leaf_shape) - len(spec))]
    rows_at, shape = row_axis(m), m.leaf_shape
    homes = [rows_at] + ([0] if m.stacked else [])
    used = {b for dim in spec for b in dim}
    movable = [b for d, dim in enumerate(spec) if d not in homes for b in dim] + \
        [b for b in names if b not in used and spans[b]]
    for b in sorted(movable, key=lambda b: not spans[b]):
        for dim in spec:
            if b in dim:  # off the other dims even when no home takes it: a split row is read through a mapping
                dim.remove(b)
        for d in homes if spans[b] else homes[:1]:  # a factor within a process: rows only (no 2-way reshard)
            if shape[d] % (size[b] * math.prod(size[c] for c in spec[d])) == 0:
                spec[d].append(b)
                break
    return NamedSharding(refined, PartitionSpec(*[tuple(dim) if dim else None for dim in spec]))


def _primes(n: int) -> list[int]:
    """The prime factors of `n`, smallest first (none for 1)."""
    out, f = [], 2
    while n > 1:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    return out


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
    if read == "direct" or not isinstance(sharding, NamedSharding) or len(m.hf_shape) < 2:
        return sharding  # vectors (norms, biases): a few KB, read whole
    if read == "auto" and len({d.process_index for d in sharding.device_set}) == 1:
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
    # the same devices in the same order: a jitted reshard, all-to-alls across the processes (donating the
    # source saves nothing: no shard of it has the target's shape, and XLA warns on every leaf)
    out = jax.block_until_ready(jax.device_put(array, sharding))
    del array
    _trim()
    return out


def _trim() -> None:
    """Hand the freed heap back to the OS (glibc's malloc_trim; a no-op elsewhere). The reshard's buffers are
    freed on XLA's threads, into per-thread malloc arenas the next leaf's reads do not reuse: untrimmed, a
    process's peak host memory grew by ~0.1x the checkpoint over a 2-process load (828 MB, CPU devices)."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 (musl and macOS have none)
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC: Any = None


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
