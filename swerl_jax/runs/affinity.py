"""Placing a role on CPU cores (`sampler.cpus`, `rl.trainer_cpus`) and on accelerators (`sampler.devices`).

    cpus = parse_cpus("0-3,8", "sampler.cpus")    # {0, 1, 2, 3, 8}; "" -> None (no pinning)
    pin(cpus, "rl.trainer_cpus")                   # this process, before JAX starts its CPU backend
    fleet_placement("", "6-7", 2)                  # [("", "6"), ("", "7")]: (cores, GPUs) of each fleet member
    device_env("6")                                # {"CUDA_VISIBLE_DEVICES": "6"} for a started sampler process

Why before the backend starts: XLA's CPU client sizes its thread pool from the cores the process may run on
(`sched_getaffinity`), so a trainer pinned to one core then runs one compute thread, not one per machine core
fighting the sampler's. Each role pins itself at its entry point (`swerl_jax.train`, the sampler server), after
reading its config and before its first JAX computation; threads and processes it starts later (Grain and
reward workers) inherit its cores. A pinned trainer's sampler may still go to other cores: a process may widen
its own mask within the machine's online cores (unless a cgroup cpuset forbids it, which `pin` reports).

Accelerators go by the environment of the process that is started: a sampler process of a fleet gets its share of
`sampler.devices` as CUDA_VISIBLE_DEVICES (physical ids, whatever its parent's own setting), so the trainer and
each sampler process hold disjoint GPUs of a node and neither preallocates the other's memory. The trainer's own
GPUs are the launcher's business (CUDA_VISIBLE_DEVICES before `python -m swerl_jax.train`, e.g.
launch/gpu_node_async.sh), since only the environment is sure to act before a backend starts.
"""

from __future__ import annotations

import os

# The machine's online cores: a child inherits its parent's mask (a sampler started by a trainer pinned to core 1
# starts on core 1) and may still move to another of these.
ONLINE_CPUS = frozenset(range(os.cpu_count() or 1))


def parse_ids(text: str, key: str, what: str = "an id list") -> frozenset[int] | None:
    """An id list ("0", "0-3", "0,2,4-5") as a set; empty means none given (None). ValueError naming `key`."""
    text = str(text or "").strip()
    if not text:
        return None
    ids: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{key}={text!r}: not {what} (e.g. '0', '0-3' or '0,2,4-5')")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"{key}={text!r}: range {part.strip()!r} runs backwards")
        ids.update(range(a, b + 1))
    return frozenset(ids)


def parse_cpus(text: str, key: str) -> frozenset[int] | None:
    """A CPU list ("0", "0-3", "0,2,4-5") as a set of core ids; empty means no pinning (None).

    Raises ValueError naming `key` for a malformed list or a core this process may not run on.
    """
    cpus = parse_ids(text, key, "a CPU list")
    if cpus is None:
        return None
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


def shares(ids: frozenset[int] | None, n: int, key: str, unit: str = "ids") -> list[str]:
    """`n` id lists (one per sampler process of a fleet) splitting `ids` into contiguous runs as equal as
    possible, the first ones one longer; n empty strings when `ids` is None. Raises ValueError naming `key` if
    there are fewer ids than processes."""
    if ids is None:
        return [""] * n
    ordered = sorted(ids)
    if len(ordered) < n:
        raise ValueError(f"{key} has {len(ordered)} {unit} for sampler.num_processes={n} processes: give each at "
                         "least one")
    q, r = divmod(len(ordered), n)
    bounds = [k * q + min(k, r) for k in range(n + 1)]
    return [",".join(map(str, ordered[bounds[k]:bounds[k + 1]])) for k in range(n)]


def cpu_shares(cpus: frozenset[int] | None, n: int, key: str = "sampler.cpus") -> list[str]:
    """`shares` of CPU cores: each fleet member's `--cpus`."""
    return shares(cpus, n, key, "cores")


def fleet_placement(cpus: str, devices: str, n: int) -> list[tuple[str, str]]:
    """(`--cpus`, CUDA_VISIBLE_DEVICES) of each of a fleet's `n` sampler processes, from `sampler.cpus` and
    `sampler.devices` ("" where the process keeps its own). One process keeps its config's sampler.cpus (it pins
    itself); a fleet's members get their shares on the command line."""
    cores = cpu_shares(parse_cpus(cpus, "sampler.cpus"), n) if n > 1 else [""]
    gpus = shares(parse_ids(devices, "sampler.devices", "a device list"), n, "sampler.devices", "devices")
    return list(zip(cores, gpus))


def device_env(share: str, memory_fraction: float = 0.0) -> dict[str, str]:
    """The environment that puts a started process on the accelerators `share` ("" -> its parent's) and caps
    the share of each one's memory it takes (`memory_fraction` > 0; 0 -> its parent's setting or the runtime's)."""
    env = {"CUDA_VISIBLE_DEVICES": share} if share else {}
    if memory_fraction > 0:
        env[MEM_FRACTION_ENV] = f"{memory_fraction:.4g}"
    return env


class PlacementError(ValueError):
    """Roles placed so that one of them cannot start (e.g. two processes asking for most of one GPU)."""


# JAX's GPU client preallocates (or caps its pool at) this share of each visible GPU's memory, read when the backend
# starts; unset, it is 0.75, so a trainer and a sampler process on one GPU would ask for 150% between them.
MEM_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"
# What the two roles may ask for together: the CUDA contexts, cuDNN/cuBLAS workspaces and the sampler's host
# transfers live outside XLA's pool (about 0.5-1 GiB per process on an H100).
SHARED_DEVICE_BUDGET = 0.95


def sampler_shares_devices(sampler_mode: str, sampler_devices: str) -> bool:
    """Whether sampler processes run on the trainer's own accelerators (mode "process", no sampler.devices)."""
    return sampler_mode == "process" and not str(sampler_devices).strip()


def check_memory_split(trainer_fraction: float, sampler_fraction: float, num_processes: int,
                       sampler_devices: str, sampler_mode: str) -> None:
    """Load-time check of `rl.trainer_memory_fraction` and `sampler.memory_fraction`: each in [0, 1), and where
    the sampler processes share the trainer's GPUs (sampler.devices="", mode "process") and both are set, the
    trainer's share plus every sampler process's fits SHARED_DEVICE_BUDGET. ValueError naming the keys."""
    for key, f in (("rl.trainer_memory_fraction", trainer_fraction), ("sampler.memory_fraction", sampler_fraction)):
        if not 0.0 <= f < 1.0:
            raise ValueError(f"{key}={f}: a share of each GPU's memory in (0, 1), or 0 for the runtime's default")
    shared = sampler_shares_devices(sampler_mode, sampler_devices)
    total = trainer_fraction + num_processes * sampler_fraction
    if shared and trainer_fraction > 0 and sampler_fraction > 0 and total > SHARED_DEVICE_BUDGET:
        raise ValueError(
            f"rl.trainer_memory_fraction={trainer_fraction} + sampler.num_processes={num_processes} x "
            f"sampler.memory_fraction={sampler_fraction} = {total:.3g} of each GPU, over "
            f"{SHARED_DEVICE_BUDGET}: the sampler shares the trainer's GPUs (sampler.devices=''); "
            "launch/plan.py --split prints a split that fits")


def shared_device_problem(platform: str, trainer_fraction: float, sampler_fraction: float, sampler_devices: str,
                          sampler_mode: str) -> str:
    """Why a GRPO run on `platform` would fail to allocate once its sampler process starts ("" if it would not):
    on a GPU, a sampler process on the trainer's own GPUs needs both memory fractions set."""
    shared = sampler_shares_devices(sampler_mode, sampler_devices)
    if platform != "gpu" or not shared or (trainer_fraction > 0 and sampler_fraction > 0):
        return ""
    return ("the sampler process shares the trainer's GPUs (sampler.devices='') but rl.trainer_memory_fraction="
            f"{trainer_fraction} and sampler.memory_fraction={sampler_fraction}: with the runtime's default each "
            "takes 75% of every GPU and the second to allocate fails. Set both (launch/plan.py --config=... --split "
            "prints a split from the planner's rows), or give the sampler GPUs of its own with sampler.devices")


def _ranges(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
