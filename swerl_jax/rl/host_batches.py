"""A batch across the processes of a multi-host run, as the GRPO trainer needs it on each host: this process's rows
of a sharded global array, groups gathered from every process (for global reward metrics), and a named barrier. Each
is the identity (or a no-op) in one process."""

from __future__ import annotations

import jax
import numpy as np


def local_rows(x: jax.Array) -> np.ndarray:
    """This process's rows of a batch-sharded global array, as numpy (the whole array in one process)."""
    if jax.process_count() == 1:
        return np.asarray(jax.device_get(x))
    shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
    seen, rows = set(), []
    for s in shards:
        start = s.index[0].start or 0
        if start not in seen:
            seen.add(start)
            rows.append(np.asarray(s.data))
    return np.concatenate(rows)


def gather_groups(x: np.ndarray) -> np.ndarray:
    """[P_local, G] per process -> [P, G] over all processes (for global reward metrics)."""
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def sharding_sync(name: str) -> None:
    """A barrier across processes (no-op in one)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
