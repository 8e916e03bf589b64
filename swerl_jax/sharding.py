"""Device meshes (data x fsdp x tensor), logical-axis rules, shardings and multi-host set-up.

The model names every parameter and major activation axis logically (`embed`, `q_heads`, `activation_batch`,
...); the rules here map those names onto the three mesh axes:

- `data`: pure data parallelism (parameters replicated);
- `fsdp`: data parallelism with parameters, gradients and optimizer state sharded on the `embed` dimension
  (ZeRO-3: each layer's weights are all-gathered when used);
- `tensor`: Megatron-style tensor parallelism over heads, MLP width and vocabulary.

The batch is split over (data, fsdp). Everything is checked against the model before anything compiles
(`validate_mesh`), so a bad mesh fails with a message naming the axis rather than deep inside XLA.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from swerl_jax.meshes import AXES, get_mesh_spec
from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.llama import Llama

log = logging.getLogger(__name__)

Rules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

DEFAULT_RULES: Rules = (
    # Activations: batch over every data-parallel axis; heads / MLP width / vocab over tensor.
    ("activation_batch", ("data", "fsdp")),
    ("activation_length", None),
    ("activation_embed", None),
    ("activation_heads", "tensor"),
    ("activation_mlp", "tensor"),
    ("activation_vocab", "tensor"),
    # Parameters: FSDP shards the model dimension, tensor parallelism the rest; layers stay whole so that
    # the scanned layer loop gathers one layer at a time.
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("layers", None),
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("norm", None),
)

# Which model dimension each logical axis spans (for divisibility checks with a readable message).
_LOGICAL_DIMS = {
    "vocab": "vocab_size", "activation_vocab": "vocab_size", "embed": "hidden_size", "norm": "hidden_size",
    "activation_embed": "hidden_size", "q_heads": "num_heads", "activation_heads": "num_heads",
    "kv_heads": "num_kv_heads", "mlp": "intermediate_size", "activation_mlp": "intermediate_size",
    "head_dim": "head_size", "layers": "num_layers",
}
_BASE_SHAPE = {"data": 1, "fsdp": -1, "tensor": 1}  # experiments/base.py's defaults: "use the named mesh's"
_BASE_DCN = {"data": 1, "fsdp": 1, "tensor": 1}


def _mesh_axes(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def logical_axis_rules(config: Any) -> Rules:
    """DEFAULT_RULES with `config.mesh.logical_axis_rules` entries ((name, axis|[axes]|None), ...) replacing theirs."""
    overrides = tuple(config.mesh.logical_axis_rules or ())
    rules = dict(DEFAULT_RULES)
    for i, entry in enumerate(overrides):
        if len(entry) != 2 or not isinstance(entry[0], str):
            raise ValueError(f"mesh.logical_axis_rules[{i}]={entry!r} is not a (logical_name, mesh_axes) pair")
        name, axes = entry
        axes = None if axes is None else (axes if isinstance(axes, str) else tuple(axes))
        for axis in _mesh_axes(axes):
            if axis not in AXES:
                raise ValueError(f"mesh.logical_axis_rules[{i}]: {name!r} -> unknown mesh axis {axis!r}; "
                                 f"known: {AXES}")
        rules[name] = axes
    return tuple(rules.items())


def resolve_mesh_shape(config: Any, n_devices: int) -> tuple[dict[str, int], dict[str, int]]:
    """Concrete (ici, dcn) axis sizes for `n_devices` devices.

    The named mesh (`config.mesh.name`) gives the defaults; `config.mesh.shape` / `config.mesh.dcn_shape`
    replace them when they differ from experiments/base.py's defaults. One ICI axis may be -1: it takes the
    devices left once the DCN and other ICI sizes are divided out.
    """
    spec = get_mesh_spec(config.mesh.name)
    shape = {a: int(v) for a, v in dict(config.mesh.shape).items()}
    dcn = {a: int(v) for a, v in dict(config.mesh.dcn_shape or _BASE_DCN).items()}
    for key, given in (("mesh.shape", shape), ("mesh.dcn_shape", dcn)):
        unknown = set(given) - set(AXES)
        if unknown:
            raise ValueError(f"{key} has unknown axes {sorted(unknown)}; the mesh axes are {AXES}")
    ici = dict(spec.ici_shape) if shape == _BASE_SHAPE else {a: shape.get(a, 1) for a in AXES}
    dcn = dict(spec.dcn_shape) if dcn == _BASE_DCN else {a: dcn.get(a, 1) for a in AXES}
    for axis in AXES:
        if dcn[axis] < 1:
            raise ValueError(f"mesh.dcn_shape.{axis}={dcn[axis]} must be >= 1")
        if ici[axis] == 0 or ici[axis] < -1:
            raise ValueError(f"mesh.shape.{axis}={ici[axis]} must be >= 1 or -1 (the rest)")
    rest = [a for a in AXES if ici[a] == -1]
    if len(rest) > 1:
        raise ValueError(f"mesh.shape: only one axis may be -1, got {rest}")
    fixed = math.prod(dcn.values()) * math.prod(v for v in ici.values() if v != -1)
    if rest:
        if n_devices % fixed:
            raise ValueError(f"mesh.shape.{rest[0]}=-1: the other axis sizes (product {fixed}, DCN included) "
                             f"do not divide the {n_devices} devices")
        ici[rest[0]] = n_devices // fixed
    elif fixed != n_devices:
        sizes = " x ".join(f"{a}={ici[a] * dcn[a]}" for a in AXES)
        raise ValueError(f"mesh.shape: {sizes} = {fixed} devices, but there are {n_devices}; "
                         "set one axis to -1 or change the sizes")
    return ici, dcn


def mesh_axis_sizes(config: Any, n_devices: int) -> dict[str, int]:
    """Global size of each mesh axis (ICI x DCN)."""
    ici, dcn = resolve_mesh_shape(config, n_devices)
    return {a: ici[a] * dcn[a] for a in AXES}


def validate_mesh(config: Any, model_config: LlamaConfig, n_devices: int, global_batch: int | None = None) -> None:
    """Raise ValueError, naming the mesh axis and model field, if the mesh cannot shard this model / batch.

    Runs before anything is traced or compiled: axis sizes must multiply to the device count and every
    sharded model dimension must be divisible by the product of the mesh axes its logical axis maps to.
    """
    sizes = mesh_axis_sizes(config, n_devices)
    for name, axes in logical_axis_rules(config):
        axes = _mesh_axes(axes)
        factor = math.prod(sizes[a] for a in axes)
        if factor == 1:
            continue
        if name == "activation_batch" and global_batch is not None and global_batch % factor:
            raise ValueError(_axis_error(axes, sizes, f"the global batch of {global_batch} sequences", name))
        field = _LOGICAL_DIMS.get(name)
        if field is None:
            continue
        dim = getattr(model_config, field)
        if dim % factor:
            raise ValueError(_axis_error(axes, sizes, f"model.{field}={dim}", name))


def _axis_error(axes: tuple[str, ...], sizes: Mapping[str, int], what: str, logical: str) -> str:
    shown = " x ".join(f"'{a}' (size {sizes[a]})" for a in axes)
    noun = "mesh axis" if len(axes) == 1 else "mesh axes"
    return (f"{noun} {shown} do{'es' if len(axes) == 1 else ''} not divide {what} "
            f"(logical axis {logical!r} is sharded over {axes}); change mesh.shape or mesh.logical_axis_rules")


def create_mesh(config: Any, devices: Sequence[Any] | None = None, model_config: LlamaConfig | None = None,
                global_batch: int | None = None) -> Mesh:
    """The (data, fsdp, tensor) Mesh over `devices` (default: all), hybrid ICI x DCN when DCN sizes > 1.

    Given `model_config` (and `global_batch`), the mesh is validated against them first (`validate_mesh`).
    """
    devices = list(jax.devices() if devices is None else devices)
    spec = get_mesh_spec(config.mesh.name)
    if spec.num_devices > 1 and len(devices) != spec.num_devices:
        # a named mesh sized for N devices silently ran on 1 before (the fsdp=-1 default took what was there)
        hint = (" (CPU: XLA_FLAGS=--xla_force_host_platform_device_count=8, or launch/local.sh with CPU_DEVICES=8)"
                if spec.device_kind == "cpu" else "")
        raise ValueError(f"mesh.name={spec.name!r} is a mesh of {spec.num_devices} {spec.device_kind} devices, but "
                         f"{len(devices)} are available{hint}; choose the mesh that matches the machine")
    if model_config is not None:
        validate_mesh(config, model_config, len(devices), global_batch)
    ici, dcn = resolve_mesh_shape(config, len(devices))
    ici_shape, dcn_shape = [ici[a] for a in AXES], [dcn[a] for a in AXES]
    if math.prod(dcn_shape) > 1:
        # DCN granules are TPU slices on TPU; elsewhere (GPU nodes, CPU processes) each process is one granule
        # (multi-process CPU devices report slice_index 0 for all, so the attribute alone does not tell).
        per_process = devices[0].platform != "tpu" or getattr(devices[0], "slice_index", None) is None
        grid = mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_shape, devices,
                                                    process_is_granule=per_process)
    elif len(devices) == 1 or devices[0].platform == "cpu":
        grid = np.asarray(devices).reshape(ici_shape)
    else:
        grid = mesh_utils.create_device_mesh(ici_shape, devices)
    return Mesh(grid, AXES)


@contextlib.contextmanager
def mesh_context(mesh: Mesh, rules: Rules = DEFAULT_RULES) -> Iterator[None]:
    """Make `mesh` and the logical rules current, so the model's `with_logical_constraint`s take effect."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        yield


def abstract_params(model_config: LlamaConfig) -> Any:
    """The model's parameters as ShapeDtypeStructs still boxed in `nn.Partitioned` (no memory allocated)."""
    tokens = jnp.zeros((1, 1), jnp.int32)
    # Attention kernel and remat do not change the parameters; XLA attention traces on any backend (cuDNN's
    # would refuse to trace on a machine without a GPU, e.g. when planning an H100 run on a laptop).
    model_config = model_config.replace(attention_impl=None, remat="none")
    variables = jax.eval_shape(lambda rng: Llama(model_config).init(rng, tokens, tokens, jnp.ones((1, 1), bool)),
                               jax.random.key(0))
    return variables["params"]


def param_partition_specs(model_config: LlamaConfig, rules: Rules = DEFAULT_RULES) -> Any:
    """PartitionSpec (mesh axes) of every parameter, from its logical names and `rules`."""
    logical = nn.get_partition_spec(abstract_params(model_config))
    return nn.logical_to_mesh(logical, rules)


def param_shardings(model_config: LlamaConfig, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> Any:
    """NamedSharding of every parameter (an unboxed tree, matching `init_params`)."""
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_partition_specs(model_config, rules),
                        is_leaf=lambda x: isinstance(x, PartitionSpec))


def init_params_sharded(model_config: LlamaConfig, mesh: Mesh, rng: jax.Array,
                        rules: Rules = DEFAULT_RULES) -> Any:
    """Random parameters created directly in their shards: no device or host ever holds the whole model."""
    shardings = param_shardings(model_config, mesh, rules)
    tokens = jnp.zeros((1, 1), jnp.int32)
    model_config = model_config.replace(attention_impl=None, remat="none")  # same params, traces anywhere

    def init(key: jax.Array) -> Any:
        variables = Llama(model_config).init(key, tokens, tokens, jnp.ones((1, 1), bool))
        return nn.meta.unbox(variables["params"])

    with mesh_context(mesh, rules):
        return jax.jit(init, out_shardings=shardings)(rng)


def replicated(mesh: Mesh) -> NamedSharding:
    """A sharding that puts a full copy on every device (scalars, step counters, metrics)."""
    return NamedSharding(mesh, PartitionSpec())


def batch_spec(rules: Rules = DEFAULT_RULES, ndim: int = 2) -> PartitionSpec:
    """PartitionSpec of a [batch, ...] array: leading dim over `activation_batch`'s mesh axes, rest whole."""
    if ndim == 0:  # a scalar riding along in the batch (e.g. a step-level constant): replicated
        return PartitionSpec()
    axes = dict(rules).get("activation_batch")
    return PartitionSpec(axes, *([None] * (ndim - 1)))


def batch_shardings(mesh: Mesh, batch: Any, rules: Rules = DEFAULT_RULES) -> Any:
    """A NamedSharding per leaf of `batch` (arrays or ShapeDtypeStructs with a leading batch dim)."""
    return jax.tree.map(lambda x: NamedSharding(mesh, batch_spec(rules, np.ndim(x) if not hasattr(x, "ndim")
                                                                 else x.ndim)), batch)


def shard_batch(local_batch: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> Any:
    """Global jax.Arrays from this process's rows (`jax.make_array_from_process_local_data`).

    Each process passes only the rows its devices hold (global batch / number of processes along the batch
    axes); single-process runs pass the whole batch.
    """
    def one(x: Any) -> jax.Array:
        x = np.asarray(x)
        return jax.make_array_from_process_local_data(NamedSharding(mesh, batch_spec(rules, x.ndim)), x)

    return jax.tree.map(one, local_batch)


def local_batch_slice(mesh: Mesh, global_batch: int, rules: Rules = DEFAULT_RULES) -> slice:
    """The rows [start, stop) of a global batch that this process's devices hold (what it must load).

    Raises if they are not one contiguous block (a mesh whose batch axes interleave processes).
    """
    sharding = NamedSharding(mesh, batch_spec(rules, 1))
    rows = sorted({idx[0].indices(global_batch)[:2] for idx in
                   sharding.addressable_devices_indices_map((global_batch,)).values()})
    start, stop = rows[0][0], rows[0][0]
    for lo, hi in rows:
        if lo > stop:
            raise ValueError(f"process {jax.process_index()} holds non-contiguous batch rows {rows}; put the "
                             "DCN / process split on the outer mesh axes (mesh.dcn_shape)")
        stop = max(stop, hi)
    return slice(start, stop)


def is_main_process() -> bool:
    """True in process 0 only: the one that writes metrics, logs and summaries."""
    return jax.process_index() == 0


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    if not value:
        return None
    try:
        return int(value)
    except ValueError as err:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from err


def initialize_distributed(config: Any | None = None) -> bool:
    """Join the multi-process JAX runtime if this is a multi-process run; returns whether it is.

    Explicit settings win: `config.mesh.coordinator_address` / `num_processes` / `process_id`, else the
    environment's JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID (launch/multiprocess_cpu.sh
    sets them). Otherwise SLURM jobs with several tasks, multi-host Cloud TPU slices and SWERL_DISTRIBUTED=auto
    (launch/tpu_pod.sh) are handed to `jax.distributed.initialize()`'s own cluster detection. SLURM runs use one
    process per node (JAX_LOCAL_DEVICE_IDS lists the node's GPUs), so DCN granules are nodes. Must run before
    any other JAX call touches the devices. CPU processes get gloo collectives (cross-process all-reduces).
    """
    if jax.distributed.is_initialized():
        return True
    m = config.mesh if config is not None else None  # no config: the environment decides
    address = (m.coordinator_address if m else "") or os.environ.get("JAX_COORDINATOR_ADDRESS", "")
    num = (m.num_processes if m else 0) or _env_int("JAX_NUM_PROCESSES") or 0
    pid = m.process_id if m else -1
    pid = pid if pid is not None and pid >= 0 else _env_int("JAX_PROCESS_ID")
    if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # JAX's preemption service catches SIGTERM and only records it for `reached_preemption_sync_point`, which
    # nothing here calls: with it on, the launcher's SIGTERM to the processes left after one failed stopped none
    # of them (issue 57: they waited out their collectives' timeouts). Off, SIGTERM ends a process.
    jax.config.update("jax_enable_preemption_service", False)
    if address and num:
        if num == 1:
            return False
        if pid is None:
            raise ValueError(f"coordinator {address} and {num} processes given, but no process id: set "
                             "JAX_PROCESS_ID or mesh.process_id")
        jax.distributed.initialize(coordinator_address=address, num_processes=num, process_id=pid)
    elif os.environ.get("SWERL_DISTRIBUTED") == "auto":
        jax.distributed.initialize()  # the launcher knows it is multi-host (launch/tpu_pod.sh): let JAX detect
    elif _env_int("SLURM_NTASKS") and _env_int("SLURM_NTASKS") > 1:
        jax.distributed.initialize()  # SLURM auto-detection: coordinator = first node of the job
    elif "," in os.environ.get("TPU_WORKER_HOSTNAMES", "") or os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"):
        jax.distributed.initialize()  # multi-host (or multi-slice) Cloud TPU
    else:
        return False
    log.info("jax.distributed: process %d of %d, %d local / %d global devices", jax.process_index(),
             jax.process_count(), jax.local_device_count(), jax.device_count())
    return True


INTERRUPTED = 130  # the exit status of a program stopped by Ctrl-C (128 + SIGINT)


@contextlib.contextmanager
def fail_alone(prog: str, hint: str) -> Iterator[None]:
    """In a multi-process run, a failure inside the block ends this process at once, with its exit status: on
    stderr an exception's traceback, then one line naming `prog`, the process and the error, and `hint` (e.g. how
    to resume); a `SystemExit` with a message (the program's own one-line errors) gets that line only.

    A plain exit would first wait at jax.distributed's shutdown barrier for the other processes, which are
    themselves waiting for this one in a collective (a checkpoint write, a train step): all of them hung ~5 minutes
    until the barrier timed out (issue 57). Exiting now lets the launcher (launch/multiprocess_cpu.sh, srun
    --kill-on-bad-exit) see the failure and stop the others. The trainers close their sampler, workers and
    checkpoint writes before an exception reaches this block. Success, `SystemExit(INTERRUPTED)` and
    single-process runs exit as usual."""
    try:
        yield
    except BaseException as e:
        if not (jax.distributed.is_initialized() and jax.process_count() > 1):
            raise
        if isinstance(e, SystemExit):  # the program's own one-line errors and statuses
            if not e.code or e.code == INTERRUPTED:  # a Ctrl-C reaches every process: they stop together, and
                raise  # the barrier keeps process 0's coordinator up until the others have closed
            code, what = (e.code, "") if isinstance(e.code, int) else (1, str(e.code).removeprefix(f"{prog}: "))
        else:
            traceback.print_exc()  # the why, for a bug; the line below is what to do
            code, what = 1, f"{type(e).__name__}: {e}"
        where = f"process {jax.process_index()} of {jax.process_count()}"
        line = f"{prog}: {where} failed: {what}" if what else f"{prog}: {where} stopped (exit {code})"
        sys.stdout.flush()
        print(f"{line}; it exits now without waiting for the other processes (its launcher stops them); {hint}",
              file=sys.stderr, flush=True)
        os._exit(code)
