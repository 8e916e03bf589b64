"""The machine a number was made on: CPU model and vendor, vector ISA level, cores, cache sizes, jax/jaxlib, XLA_FLAGS.

The demo's table depends on the CPU (issue 57 item 8): on one machine it repeats to the last digit, but an Intel
Xeon (AVX-512) host and the AMD EPYC hosts of earlier sessions print different tables from the same code and seed.
Capping XLA at AVX2 did not move the Intel table and XNNPACK off did not move its numbers either, so what differs
between the hosts is below XLA's flags (the CPU runtime's matmul blocking reads the cache sizes). Every demo table
is therefore named with its machine (`describe` in the printout, `machine_info` in its report).
Reads Linux's /proc/cpuinfo and /sys (`root`, for tests); a field it cannot read is None, never a guess.
"""

from __future__ import annotations

import os
import pathlib
import platform

ISA_LEVELS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2"))


def _cpuinfo(root: pathlib.Path) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    path = root / "proc" / "cpuinfo"
    fields: dict[str, str] = {}
    if not path.is_file():
        return fields
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _caches(root: pathlib.Path) -> dict[str, str]:
    """{"L1d": "48K", "L1i": "64K", "L2": "2048K", "L3": ...} of cpu0, from sysfs ({} where it is absent)."""
    caches = {}
    base = root / "sys" / "devices" / "system" / "cpu" / "cpu0" / "cache"
    for index in sorted(base.glob("index*")) if base.is_dir() else []:
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches[f"L{level}{suffix}"] = size
    return caches


def machine_info(root: str | os.PathLike = "/") -> dict:
    """What the machine is, as far as a number made on it may depend on it."""
    import jax
    import jaxlib

    root = pathlib.Path(root)
    cpu = _cpuinfo(root)
    flags = set(cpu.get("flags", "").split())
    isa = next((name for flag, name in ISA_LEVELS if flag in flags), None) if flags else None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {"cpu_model": cpu.get("model name") or platform.processor() or None,
            "cpu_vendor": cpu.get("vendor_id"), "isa": isa, "cores": os.cpu_count(), "usable_cores": usable,
            "caches": _caches(root), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "xla_flags": os.environ.get("XLA_FLAGS", ""), "machine": platform.machine(),
            "python": platform.python_version()}


def describe(info: dict) -> str:
    """One line: `Intel(R) Xeon(R) Processor (GenuineIntel, AVX-512), 2 cores, caches L1d 48K ...; jax 0.10.2 ...`."""
    caches = " ".join(f"{k} {v}" for k, v in info.get("caches", {}).items()) or "caches unknown"
    cores = f"{info.get('cores')} cores" + (f" ({info['usable_cores']} usable)" if info.get("usable_cores") not in
                                            (None, info.get("cores")) else "")
    return (f"{info.get('cpu_model') or 'unknown CPU'} ({info.get('cpu_vendor') or 'vendor unknown'}, "
            f"{info.get('isa') or 'ISA unknown'}), {cores}, {caches}; jax {info.get('jax')} jaxlib "
            f"{info.get('jaxlib')}, XLA_FLAGS={info.get('xla_flags') or '(none)'}")
