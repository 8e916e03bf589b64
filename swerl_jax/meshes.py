"""Named device meshes: the hardware (device kind, HBM, peak bf16 FLOP/s) and default ICI/DCN axis sizes.

A config selects one with `mesh.name`; `mesh.shape` / `mesh.dcn_shape` override the axis sizes (see
`swerl_jax.sharding.resolve_mesh_shape`). ICI sizes are per slice / per node (fast interconnect: NVLink or TPU
ICI); DCN sizes multiply them across slices / nodes (data-centre network). The product over both is the
global axis size. -1 means "the rest of the devices".

Hardware figures are the vendors' published dense bf16 peaks, HBM capacities and HBM bandwidths (per JAX
device: a TPU chip since v4, one GPU). TPU meshes name their slice's topology (`v5p:4x8x8`: chips per
dimension), which `launch/compile.py` hands to XLA's TPU compiler to compile for that slice without one.
"""

from __future__ import annotations

import dataclasses

AXES = ("data", "fsdp", "tensor")

GiB = 1024**3


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """A named mesh: how many devices of which kind, and the default axis sizes within and across slices."""

    name: str
    device_kind: str  # "cpu", "gpu" or "tpu": which jax platform runs it
    num_devices: int  # 0: whatever jax.devices() offers (CPU meshes)
    hbm_bytes: int  # memory per device
    peak_bf16_flops: float  # dense bf16 FLOP/s per device
    ici_shape: dict[str, int]
    dcn_shape: dict[str, int]
    description: str = ""
    hbm_bandwidth: float = 0.0  # bytes/s per device (roofline memory time)
    topology: str = ""  # TPU only: jax.experimental.topologies name of one slice, e.g. "v5p:4x8x8"

    @property
    def num_slices(self) -> int:
        """Slices (TPU) or nodes (GPU) joined by DCN: the product of the DCN axis sizes."""
        n = 1
        for axis in AXES:
            n *= self.dcn_shape.get(axis, 1)
        return n


def _shape(data: int = 1, fsdp: int = 1, tensor: int = 1) -> dict[str, int]:
    return {"data": data, "fsdp": fsdp, "tensor": tensor}


_H100 = dict(device_kind="gpu", hbm_bytes=80 * 10**9, peak_bf16_flops=989e12, hbm_bandwidth=3.35e12)
# H200: the H100's compute (same dense bf16 peak) with 141 GB of HBM3e at 4.8 TB/s.
_H200 = dict(device_kind="gpu", hbm_bytes=141 * 10**9, peak_bf16_flops=989e12, hbm_bandwidth=4.8e12)
# Cloud TPU: v4 32 GiB 1.2 TB/s 275 TFLOP/s; v5p 95 GiB 2.765 TB/s 459 TFLOP/s; v6e 32 GiB 1.64 TB/s 918 TFLOP/s.
_V4 = dict(device_kind="tpu", hbm_bytes=32 * GiB, peak_bf16_flops=275e12, hbm_bandwidth=1.2e12)
_V5P = dict(device_kind="tpu", hbm_bytes=95 * GiB, peak_bf16_flops=459e12, hbm_bandwidth=2.765e12)
_V6E = dict(device_kind="tpu", hbm_bytes=32 * GiB, peak_bf16_flops=918e12, hbm_bandwidth=1.64e12)

MESHES: dict[str, MeshSpec] = {m.name: m for m in [
    # CPU meshes size themselves to the devices present (`--xla_force_host_platform_device_count`).
    MeshSpec("cpu", "cpu", 1, 16 * GiB, 1e12, _shape(fsdp=-1), _shape(), "one CPU device"),
    MeshSpec("cpu8", "cpu", 8, 16 * GiB, 1e12, _shape(fsdp=-1), _shape(), "8 fake CPU devices (tests)"),
    MeshSpec("h100x1", num_devices=1, ici_shape=_shape(), dcn_shape=_shape(), description="one H100 80GB",
             **_H100),
    MeshSpec("h200x1", num_devices=1, ici_shape=_shape(), dcn_shape=_shape(), description="one H200 141GB",
             **_H200),
    # One node: FSDP over NVLink (8 x 80 GB hold 70B params + Adam state only with remat; see launch/plan.py).
    MeshSpec("h100x8", num_devices=8, ici_shape=_shape(fsdp=8), dcn_shape=_shape(), description="one 8xH100 node",
             **_H100),
    MeshSpec("h100x64", num_devices=64, ici_shape=_shape(fsdp=8), dcn_shape=_shape(fsdp=8),
             description="8 nodes of 8xH100, FSDP across nodes", **_H100),
    # The paper's run: 512 sequences per step = one 16k sequence per GPU; FSDP over all 512 GPUs keeps the
    # 70B state at ~2 GB per device, leaving HBM for 16k-token activations under full remat.
    MeshSpec("h100x512", num_devices=512, ici_shape=_shape(fsdp=8), dcn_shape=_shape(fsdp=64),
             description="64 nodes of 8xH100 (SWE-RL's 70B run)", **_H100),
    # TPU names count TensorCores for v4/v5p (2 per chip, one JAX device per chip) and chips for v6e.
    MeshSpec("tpu-v4-8", num_devices=4, ici_shape=_shape(fsdp=4), dcn_shape=_shape(), topology="v4:2x2x1",
             description="TPU v4-8: 4 chips", **_V4),
    MeshSpec("tpu-v5p-8", num_devices=4, ici_shape=_shape(fsdp=4), dcn_shape=_shape(), topology="v5p:2x2x1",
             description="TPU v5p-8: 4 chips (the suite's deviceless compile)", **_V5P),
    MeshSpec("tpu-v5p-64", num_devices=32, ici_shape=_shape(fsdp=32), dcn_shape=_shape(), topology="v5p:2x4x4",
             description="TPU v5p-64: 32 chips", **_V5P),
    MeshSpec("tpu-v5p-128", num_devices=64, ici_shape=_shape(fsdp=64), dcn_shape=_shape(), topology="v5p:4x4x4",
             description="TPU v5p-128: 64 chips", **_V5P),
    MeshSpec("tpu-v5p-512", num_devices=256, ici_shape=_shape(fsdp=256), dcn_shape=_shape(), topology="v5p:4x8x8",
             description="TPU v5p-512: 256 chips", **_V5P),
    # The TPU counterpart of h100x512: as many chips as the paper's GPUs (one 16k sequence per chip).
    MeshSpec("tpu-v5p-1024", num_devices=512, ici_shape=_shape(fsdp=512), dcn_shape=_shape(),
             topology="v5p:8x8x8", description="TPU v5p-1024: 512 chips", **_V5P),
    MeshSpec("tpu-v6e-256", num_devices=256, ici_shape=_shape(fsdp=256), dcn_shape=_shape(), topology="v6e:16x16",
             description="TPU v6e-256: 256 chips", **_V6E),
]}


def get_mesh_spec(name: str) -> MeshSpec:
    """The named mesh (or "<tpu mesh>x<slices>", see `multislice_spec`); a clear error lists the known names."""
    base, _, slices = name.rpartition("x")
    if name not in MESHES and slices.isdigit() and MESHES.get(base, None) and MESHES[base].device_kind == "tpu":
        return multislice_spec(base, int(slices))
    if name not in MESHES:
        raise KeyError(f"unknown mesh.name={name!r}; known: {', '.join(MESHES)}")
    return MESHES[name]


def multislice_spec(name: str, slices: int) -> MeshSpec:
    """`slices` copies of the named TPU slice joined by DCN (data parallel across them unless mesh.dcn_shape
    says otherwise), named "<name>x<slices>", which `get_mesh_spec` (so `mesh.name`) accepts."""
    spec = get_mesh_spec(name)
    if slices < 1 or spec.device_kind != "tpu":
        raise ValueError(f"multislice_spec({name!r}, {slices}): needs a TPU mesh and slices >= 1")
    if slices == 1:
        return spec
    return dataclasses.replace(spec, name=f"{name}x{slices}", num_devices=spec.num_devices * slices,
                               dcn_shape=_shape(data=slices), description=f"{slices} x {spec.description}")
