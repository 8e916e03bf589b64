"""Placing a role on CPU cores: `sampler.cpus` (the sampler process) and `rl.trainer_cpus` (the trainer).

    cpus = parse_cpus("0-3,8", "sampler.cpus")    # {0, 1, 2, 3, 8}; "" -> None (no pinning)
    pin(cpus, "rl.trainer_cpus")                   # this process, before JAX starts its CPU backend

Why before the backend starts: XLA's CPU client sizes its thread pool from the cores the process may run on
(`sched_getaffinity`), so a trainer pinned to one core then runs one compute thread, not one per machine core
fighting the sampler's. Each role pins itself at its entry point (`swerl_jax.train`, the sampler server), after
reading its config and before its first JAX computation; threads and processes it starts later (Grain and
reward workers) inherit its cores. A pinned trainer's sampler may still go to other cores: a process may widen
its own mask within the machine's online cores (unless a cgroup cpuset forbids it, which `pin` reports).
"""

from __future__ import annotations

import os

# The machine's online cores: a child inherits its parent's mask (a sampler started by a trainer pinned to core 1
# starts on core 1) and may still move to another of these.
ONLINE_CPUS = frozenset(range(os.cpu_count() or 1))


def parse_cpus(text: str, key: str) -> frozenset[int] | None:
    """A CPU list ("0", "0-3", "0,2,4-5") as a set of core ids; empty means no pinning (None).

    Raises ValueError naming `key` for a malformed list or a core this process may not run on.
    """
    text = str(text or "").strip()
    if not text:
        return None
    cpus: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{key}={text!r}: not a CPU list (e.g. '0', '0-3' or '0,2,4-5')")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"{key}={text!r}: range {part.strip()!r} runs backwards")
        cpus.update(range(a, b + 1))
    if not cpus <= ONLINE_CPUS:
        raise ValueError(f"{key}={text!r}: cores {sorted(cpus - ONLINE_CPUS)} do not exist (this machine has "
                         f"{_ranges(ONLINE_CPUS)})")
    return frozenset(cpus)


def pin(cpus: frozenset[int] | None, key: str) -> None:
    """Restrict this process to `cpus` (no-op for None); call before JAX initialises its backend."""
    if cpus is not None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as e:  # e.g. a cgroup cpuset without these cores
            raise ValueError(f"{key}: cannot run on cores {_ranges(cpus)}: {e}") from None


def cpu_shares(cpus: frozenset[int] | None, n: int, key: str = "sampler.cpus") -> list[str]:
    """`n` CPU lists (one per sampler process of a fleet: its `--cpus`) splitting `cpus` into contiguous runs as
    equal as possible, the first ones one core longer; n empty strings (no pinning) when `cpus` is None. Raises
    ValueError naming `key` if there are fewer cores than processes."""
    if cpus is None:
        return [""] * n
    ordered = sorted(cpus)
    if len(ordered) < n:
        raise ValueError(f"{key} has {len(ordered)} cores for sampler.num_processes={n} processes: give each at "
                         "least one")
    q, r = divmod(len(ordered), n)
    bounds = [k * q + min(k, r) for k in range(n + 1)]
    return [",".join(map(str, ordered[bounds[k]:bounds[k + 1]])) for k in range(n)]


def _ranges(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
