"""Placing a role on CPU cores: `sampler.cpus` (the sampler process) and `rl.trainer_cpus` (the trainer).

    cpus = parse_cpus("0-3,8", "sampler.cpus")    # {0, 1, 2, 3, 8}; "" -> None (no pinning)
    pin(cpus, "rl.trainer_cpus")                   # this process, before JAX starts its CPU backend

Why before the backend starts: XLA's CPU client sizes its thread pool from the cores the process may run on
(`sched_getaffinity`), so a trainer pinned to one core then runs one compute thread, not one per machine core
fighting the sampler's. A child process (the sampler server) is pinned between fork and exec (`preexec`), so it
never runs a line on other cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable

# The cores this process could run on when it started: a pinned trainer still places its sampler on another.
STARTUP_CPUS = frozenset(os.sched_getaffinity(0))


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
    allowed = STARTUP_CPUS
    if not cpus <= allowed:
        raise ValueError(f"{key}={text!r}: cores {sorted(cpus - allowed)} are not available to this process "
                         f"(it may run on {_ranges(allowed)})")
    return frozenset(cpus)


def pin(cpus: frozenset[int] | None, key: str) -> None:
    """Restrict this process to `cpus` (no-op for None); call before JAX initialises its backend."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def preexec(cpus: frozenset[int] | None) -> Callable[[], None] | None:
    """A `subprocess.Popen(preexec_fn=...)` pinning the child to `cpus` before it execs (None: no pinning)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def _ranges(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
