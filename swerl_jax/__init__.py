"""swerl_jax: SWE-RL and DeepSWE in JAX.

Importing the package picks JAX's platform when the user has not: on a machine with no TPU and no CUDA plugin,
JAX_PLATFORMS=cpu, so the installed libtpu (for deviceless TPU compiles, `launch/compile.py`) does not print its
`E0000 ... INVALID_ARGUMENT` initialisation errors into every command's output. Set JAX_PLATFORMS to override.
"""

from __future__ import annotations

import glob
import importlib.util
import os


def _default_jax_platform() -> None:
    """JAX_PLATFORMS=cpu unless it is set, a TPU is attached (/dev/accel*, /dev/vfio) or a CUDA plugin is installed
    (then JAX's own choice stands)."""
    if "JAX_PLATFORMS" in os.environ or glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return
    if any(importlib.util.find_spec(name) for name in ("jax_cuda12_plugin", "jax_cuda13_plugin")):
        return
    os.environ["JAX_PLATFORMS"] = "cpu"


_default_jax_platform()
