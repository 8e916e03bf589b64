"""Will this config fit? Per-device memory of the train step and the sampler, from abstract shapes only.

    python launch/plan.py --config=experiments/swerl_llama3_70b.py --mesh=h100x512 [--model=llama3.1-8b]
    python launch/plan.py --config=experiments/swerl_llama3_70b.py --all   # every mesh x {1B, 8B, 70B}
    python launch/plan.py --config=experiments/swerl_llama3_70b.py --config.mesh.name=h100x64 \
        --config.mesh.shape.tensor=8 --config.rl.micro_batch_size=64

Parameters come from `jax.eval_shape` of the model's init (nothing is allocated) and are sharded with the
config's logical-axis rules, so the per-device bytes of params, gradients and optimizer state are exact up
to padding. Activations are a per-layer count of what the backward pass keeps (see `layer_activation_bytes`).

Assumptions: gradients in param_dtype; Adam keeps 2 moments in param_dtype and no master copy (what
`optax.adamw` does and XLA's argument bytes confirm: 6 bytes per bf16 parameter, see launch/compile.py); FSDP
all-gathers one layer's weights at a time; the loss projects to the vocabulary only over the scored tokens (RL:
the completion, SFT: the sequence), in fp32; the peak is the saved activations plus the larger of one layer's
backward and the loss; one micro-batch's activations live at a time (gradient accumulation over micro-batches);
the sampler is a separate process on the same kind of mesh, holding params in `dtype` and a KV cache for
`sampler.max_batch` sequences of prompt + completion. Where it shares the trainer's devices (`sampler.devices=""`,
the default) the two roles' rows are checked against the device together, and `--split` prints the memory split
(`rl.trainer_memory_fraction`, `sampler.memory_fraction`) that launch scripts hand the trainer:

    python launch/plan.py --config=experiments/testbed_gpu.py --mesh=h100x1 --split
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

# Abstract shapes only: no accelerator is needed, and with libtpu installed (the dev extra) JAX would otherwise
# probe for a TPU and print libtpu's errors on every machine without one.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp
from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from launch.train_shapes import longest_rl_row, update_rows  # noqa: E402
from swerl_jax import sharding  # noqa: E402
from swerl_jax.cli import absl_flags_parser, one_line_input_errors  # noqa: E402
from swerl_jax.meshes import AXES, MESHES, get_mesh_spec  # noqa: E402
from swerl_jax.model.config import FROM_CHECKPOINT, LlamaConfig, get_model_config  # noqa: E402
from swerl_jax.resolve import resolve_config  # noqa: E402
from swerl_jax.runs.affinity import sampler_shares_devices  # noqa: E402

GiB = 1024**3
# What a sampler process needs beyond its planned weights and KV cache: the decode step's temporaries (logits,
# sampling), compiled programs' scratch and the staging of a new policy version's weights. Measured (H200,
# BENCHMARKS "The whole loop on one GPU"): testbed_gpu's sampler held 3.6 GiB by the driver's count against 0.66
# GiB of rows (about 0.5 GiB of it the CUDA context, outside XLA's pool).
SAMPLER_HEADROOM = 3 * GiB
PLAN_MODELS = ("llama3.2-1b", "llama3.1-8b", "llama3.3-70b")


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one train micro-step and the sampler process: global sequences and lengths."""

    micro_batch: int  # sequences per micro-batch (global)
    seq_len: int  # tokens per training sequence
    loss_len: int  # positions projected to the vocabulary per sequence
    sampler_batch: int  # sequences decoded at once (global)
    sampler_len: int  # KV-cache slots per sequence


def workload_from_config(config: Any, mode: str = "rl") -> Workload:
    """The RL (prompt + completion, loss over the completion) or SFT workload the config describes."""
    sampler_len = config.data.max_prompt_len + config.sampler.max_new_tokens
    if mode == "sft":
        return Workload(config.sft.micro_batch_size or config.sft.batch_size, config.sft.max_len, config.sft.max_len,
                        config.sampler.max_batch, sampler_len)
    step_batch = update_rows(config, mode)
    micro = min(config.rl.micro_batch_size or step_batch, step_batch)
    if str(config.rl.task) == "agent":  # a row is a whole episode: task + turns + observations, <= max_context
        prompt, context = longest_rl_row(config)  # the task's first token, then everything else
        return Workload(micro, prompt + context, context, config.sampler.max_batch, sampler_len)
    return Workload(micro, sampler_len, config.sampler.max_new_tokens, config.sampler.max_batch, sampler_len)


def _bytes(dtype: str) -> int:
    return jnp.dtype(dtype).itemsize


def _factor(axes: Any, sizes: dict[str, int]) -> int:
    if axes is None:
        return 1
    axes = (axes,) if isinstance(axes, str) else axes
    return math.prod(sizes[a] for a in axes)


def param_elements_per_device(model: LlamaConfig, sizes: dict[str, int], rules: sharding.Rules) -> int:
    """Parameter elements one device holds under `rules` (shards rounded up, as XLA pads them)."""
    return _param_elements(model, tuple(sorted(sizes.items())), tuple(rules))


@functools.lru_cache(maxsize=256)
def _param_elements(model: LlamaConfig, sizes_items: tuple, rules: sharding.Rules) -> int:
    sizes = dict(sizes_items)
    abstract = jax.tree.leaves(sharding.abstract_params(model), is_leaf=lambda x: hasattr(x, "names"))
    specs = jax.tree.leaves(sharding.param_partition_specs(model, rules),
                            is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    total = 0
    for boxed, spec in zip(abstract, specs, strict=True):
        shape = boxed.value.shape
        spec = tuple(spec) + (None,) * (len(shape) - len(spec))
        total += math.prod(-(-d // _factor(a, sizes)) for d, a in zip(shape, spec))
    return total


def layer_activation_bytes(model: LlamaConfig, b: int, t: int, tensor: int, remat: str) -> int:
    """Bytes one decoder layer keeps for its backward pass, for b sequences of t tokens on one device.

    Counted per layer (s = bytes of `dtype`, E hidden, F MLP width, H/KV heads of size D, sharded by `tensor`):
    "none": layer input, two norm outputs, attention and MLP outputs, the residual (6 bTE s) plus the fp32
    norm statistics' inputs (2 bTE 4), q/k/v and the attention output (bT(2H + 2KV)D/tensor s), attention
    probabilities with XLA attention (bH T^2/tensor x 3 s: logits, masked logits and probabilities; measured
    12 bytes a score in fp32 on XLA:CPU (tests/launch/test_plan.py) and 6 in bf16 on XLA:TPU, whose 70B step at
    16k tokens keeps 122 GiB of temporaries, BENCHMARKS.md "Deviceless TPU compilation") or, with a
    flash kernel (cuDNN, Pallas splash), only the fp32 log-sum-exp per query and head (bHT/tensor 4),
    the SwiGLU's gate, up, silu and product (4 bTF/tensor s), and with Qwen3's q/k norm its input, output and
    fp32 statistics input (bT(H + KV)D/tensor (2s + 4)). "full": only the layer input bTE s. A checkpoint policy
    (dots_with_no_batch_dims_saveable and friends) keeps the projections' outputs:
    bT(H + 2KV)D/tensor s + 2 bTE s + 2 bTF/tensor s.
    """
    s = _bytes(model.dtype)
    e, f, d = model.hidden_size, model.intermediate_size, model.head_size
    h, kv = model.num_heads / tensor, model.num_kv_heads / tensor
    bt = b * t
    if remat == "full":
        return bt * e * s
    projections = bt * (h + 2 * kv) * d * s
    if remat != "none":
        return int(projections + 2 * bt * e * s + 2 * bt * f / tensor * s)
    flash = model.attention_impl in ("cudnn", "pallas")
    attention = b * h * t * 4 if flash else b * h * t * t * 3 * s
    # Qwen3's per-head q/k RMSNorm keeps its input and output and the fp32 input of its statistics, like the
    # layer norms (measured on XLA:CPU: +12 bytes per q/k element in fp32, tests/launch/test_plan.py).
    qk_norm = bt * (h + kv) * d * (2 * s + 4) if model.qk_norm else 0
    return int(6 * bt * e * s + 2 * bt * e * 4 + projections + bt * h * d * s + attention + 4 * bt * f / tensor * s
               + qk_norm)


@dataclasses.dataclass
class Plan:
    """Per-device bytes by component; `total` is the train step's peak under the config's remat."""

    mesh: str
    model: str
    sizes: dict[str, int]
    rows: dict[str, int]
    hbm: int
    usable: float
    notes: list[str]
    # sampler processes on each of the trainer's devices (sampler.devices="", mode "process"): their memory and
    # the trainer's add up on one device; 0 when the sampler has devices of its own (or runs inline)
    shared_samplers: int = 0

    @property
    def total(self) -> int:
        return self.rows["train total"]

    @property
    def device_total(self) -> int:
        """What one device holds at the peak: the trainer's, plus every sampler process's that shares it."""
        return self.total + self.shared_samplers * self.rows["sampler total"]

    @property
    def fits(self) -> bool:
        budget = self.hbm * self.usable
        return self.device_total <= budget and self.rows["sampler total"] <= budget

    def memory_split(self) -> tuple[float, float]:
        """(rl.trainer_memory_fraction, sampler.memory_fraction) for roles sharing a device: the usable budget
        split in proportion to each role's planned bytes, so each gets its rows plus a proportional share of the
        slack (XLA's temporaries and the sampler's logits are not in the rows), but a sampler never less than its
        rows plus SAMPLER_HEADROOM; rounded down to 0.01."""
        if not self.shared_samplers:
            return self.usable, self.usable
        rows = self.rows["sampler total"]
        sampler = max(self.usable * rows / self.device_total, (rows + SAMPLER_HEADROOM) / self.hbm)
        sampler = math.floor(sampler * 100) / 100
        train = math.floor((self.usable - self.shared_samplers * sampler) * 100) / 100
        return train, sampler

    def split_flags(self) -> str:
        """The split as the trainer's command-line overrides: GPUs only ("" when the sampler has devices of its own,
        and on CPU meshes, where XLA's memory fraction does not apply)."""
        if not self.shared_samplers or get_mesh_spec(self.mesh).device_kind != "gpu":
            return ""
        train, sampler = self.memory_split()
        return f"--config.rl.trainer_memory_fraction={train} --config.sampler.memory_fraction={sampler}"


def estimate(model: LlamaConfig, sizes: dict[str, int], rules: sharding.Rules, work: Workload,
             optimizer_fp32_moments: bool = False, micro_batches: int = 1) -> dict[str, int]:
    """Per-device bytes of every component (see the module docstring for the assumptions).

    `micro_batches` > 1 adds the fp32 gradient accumulator `train_step.accumulate_gradients` keeps beside each
    micro-batch's param_dtype gradients.
    """
    batch_shards = _factor(dict(rules).get("activation_batch"), sizes)
    tensor = _factor(dict(rules).get("activation_heads"), sizes)
    vocab_shards = _factor(dict(rules).get("activation_vocab"), sizes)
    fsdp = _factor(dict(rules).get("embed"), sizes)
    n = param_elements_per_device(model, sizes, rules)
    p, s = _bytes(model.param_dtype), _bytes(model.dtype)
    rows = {"params": n * p, "grads": n * p + (n * 4 if micro_batches > 1 else 0)}
    # optax.adamw's moments follow the params' dtype (mu_dtype=None); `optimizer_fp32_moments` plans an optimizer
    # with fp32 moments and an fp32 master copy instead (not what swerl_jax.optim builds).
    master = 4 if p != 4 else 0
    rows["optimizer"] = n * (8 + master) if optimizer_fp32_moments else n * 2 * p
    b = -(-work.micro_batch // batch_shards)
    t = work.seq_len
    for remat in ("none", "full", model.remat):
        rows[f"saved activations (remat={remat})"] = model.num_layers * layer_activation_bytes(model, b, t, tensor,
                                                                                             remat)
    # The backward's peak is the larger of two phases on top of the saved activations:
    # - a layer's backward: its recomputed activations (under remat), its weights all-gathered by FSDP (still
    #   tensor-sharded) and the fp32 gradient flowing through the hidden states (in and out);
    # - the loss: fp32 logits over the scored positions, the probabilities (the GRPO loss logs the entropy) and
    #   their gradient, with the gathered embedding/head. With two copies the 8B GRPO step on v5p-64 was planned
    #   16% under XLA's compiled peak (12.7 vs 15.0 GiB); SFT, without the entropy, is over-planned by one copy.
    e, f, d = model.hidden_size, model.intermediate_size, model.head_size
    layer_weights = (e * d * (2 * model.num_heads + 2 * model.num_kv_heads) + 3 * e * f) / tensor * s
    # the families' own weights: Qwen2's q/k/v biases (sharded like the heads), Qwen3's two q/k norm scales
    layer_weights += ((model.num_heads + 2 * model.num_kv_heads) * d / tensor * s if model.qkv_bias else 0) \
        + (2 * d * s if model.qk_norm else 0)
    head_weights = model.vocab_size * e / vocab_shards * s * (1 if model.tie_word_embeddings else 2)
    recompute = layer_activation_bytes(model, b, t, tensor, "none") if model.remat != "none" else 0
    # Beside them the backward holds the gradients of the layer's widest intermediates: the SwiGLU's gate and up
    # (2 bTF/tensor s) and the attention's fp32 q/k/v gradients (bT(H + 2KV)D/tensor 4). Without this term the
    # 70B step on v5p-512 (Pallas attention) was planned 20% under XLA's compiled peak (31.2 vs 39.0 GiB).
    grads_in_flight = 2 * b * t * f / tensor * s + b * t * (model.num_heads + 2 * model.num_kv_heads) * d / tensor * 4
    rows["layer backward peak"] = int(recompute + grads_in_flight + (layer_weights if fsdp > 1 else 0)
                                      + 2 * b * t * e * 4)
    rows["loss peak (fp32 logits)"] = int(b * work.loss_len * model.vocab_size / vocab_shards * 4 * 3
                                          + (head_weights if fsdp > 1 else 0))
    rows["train total"] = (rows["params"] + rows["grads"] + rows["optimizer"]
                           + rows[f"saved activations (remat={model.remat})"]
                           + max(rows["layer backward peak"], rows["loss peak (fp32 logits)"]))
    sb = -(-work.sampler_batch // batch_shards)
    kv_heads = model.num_kv_heads / _factor(dict(rules).get("kv_heads"), sizes)
    rows["sampler params"] = n * s
    rows["sampler KV cache"] = int(2 * model.num_layers * sb * work.sampler_len * kv_heads * d * s)
    rows["sampler total"] = rows["sampler params"] + rows["sampler KV cache"]
    return rows


def make_plan(config: Any, mesh: str, model_name: str | None = None, mode: str = "rl",
              usable: float = 0.9) -> Plan:
    """The plan for `config` on the named mesh (its device count), optionally with another model."""
    spec = get_mesh_spec(mesh)
    config = config.copy_and_resolve_references()
    config.mesh.name = mesh
    m = config.model
    if (model_name or m.name) == FROM_CHECKPOINT:  # the shape is model.hf_dir's config.json
        from swerl_jax.policy import model_config_from

        model = model_config_from(config)
    else:
        model = get_model_config(model_name or m.name, param_dtype=m.param_dtype, dtype=m.dtype, remat=m.remat,
                                 attention_impl=m.attention_impl)
    n_devices = spec.num_devices
    sizes = sharding.mesh_axis_sizes(config, n_devices)
    work = workload_from_config(config, mode)
    notes = []
    try:
        sharding.validate_mesh(config, model, n_devices)
    except ValueError as err:
        notes.append(f"invalid mesh: {err}")
    shards = sizes["data"] * sizes["fsdp"]
    if work.micro_batch % shards:  # the trainer refuses this config at load time (sharding.validate_mesh)
        key = "sft.micro_batch_size" if mode == "sft" else "rl.micro_batch_size"
        notes.append(f"invalid {key}: a micro-batch of {work.micro_batch} sequences does not split over {shards} "
                     f"batch shards (data x fsdp); planned as {-(-work.micro_batch // shards)} per device: set "
                     f"{key} to a multiple of {shards}")
    rules = sharding.logical_axis_rules(config)
    step_batch = update_rows(config, mode)
    num_micro = max(1, step_batch // max(1, work.micro_batch))  # > 1 adds the fp32 gradient accumulator
    rows = estimate(model, sizes, rules, work, micro_batches=num_micro)
    # The largest per-device micro-batch (sequences) whose train step fits: what rl.micro_batch_size could be.
    shared = sampler_shares_devices(str(config.sampler.mode), str(config.sampler.devices))
    shared_samplers = int(config.sampler.num_processes) if shared and mode == "rl" else 0
    if shared_samplers and spec.device_kind == "tpu":  # a TPU chip belongs to one process
        notes.append("the sampler process shares the trainer's TPU chips (sampler.devices=''), which one process "
                     "holds at a time: run it inline (sampler.mode='inline') or on chips of its own")
    budget = spec.hbm_bytes * usable - shared_samplers * rows["sampler total"]  # what the samplers leave
    fit = 0
    for per_device in (1, 2, 4, 8, 16, 32, 64):
        trial = dataclasses.replace(work, micro_batch=per_device * shards)
        trial_micro = max(1, step_batch // trial.micro_batch)
        if estimate(model, sizes, rules, trial, micro_batches=trial_micro)["train total"] > budget:
            break
        fit = per_device
    notes.append(f"largest micro-batch that fits: {fit} per device = {fit * shards} sequences" if fit else
                 "not even one sequence per device fits: more devices, tensor parallelism or remat")
    return Plan(mesh, model_name or m.name, sizes, rows, spec.hbm_bytes, usable, notes, shared_samplers)


def format_plan(plan: Plan, work: Workload) -> str:
    """A readable table with the verdict."""
    shape = " x ".join(f"{a}={plan.sizes[a]}" for a in AXES)
    lines = [f"model {plan.model} on {plan.mesh} ({shape}); micro-batch {work.micro_batch} x {work.seq_len} "
             f"tokens, loss over {work.loss_len}; sampler {work.sampler_batch} x {work.sampler_len} slots",
             f"{'component':<32}{'GiB/device':>12}"]
    lines += [f"{k:<32}{v / GiB:>12.3f}" for k, v in plan.rows.items()]
    budget = plan.hbm * plan.usable
    lines.append(f"{'HBM (usable ' + format(plan.usable, '.0%') + ')':<32}{budget / GiB:>12.3f}")
    lines += [f"note: {n}" for n in plan.notes]
    invalid = [n for n in plan.notes if n.startswith("invalid")]
    if invalid:  # the trainer would refuse the config: say why, not "does not fit"
        lines.append(f"verdict: {invalid[0].split(':')[0]} (the trainer refuses this config; see the note)")
        return "\n".join(lines)
    if plan.shared_samplers:
        lines.append(f"{f'trainer + {plan.shared_samplers} sampler (one device)':<32}"
                     f"{plan.device_total / GiB:>12.3f}")
    verdict = "fits" if plan.fits else "does not fit"
    where = "per device"
    if plan.shared_samplers:
        where = "together on each device: the sampler shares the trainer's devices" + (
            f"; split {plan.split_flags()}" if plan.fits else "; give it devices of its own (sampler.devices) or "
            "shrink rl.micro_batch_size / sampler.max_batch")
    lines.append(f"verdict: {verdict} (train {plan.total / GiB:.2f} GiB, sampler "
                 f"{plan.rows['sampler total'] / GiB:.2f} GiB, {where})")
    return "\n".join(lines)


def load_config(path: str) -> Any:
    """`get_config()` of an experiment file (experiments/X.py; "path:arg" passes arg)."""
    path, _, arg = path.partition(":")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or not Path(path).is_file():
        raise FileNotFoundError(f"--config={path}: no such experiment file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg or None)


FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", "experiments/swerl_llama3_70b.py",
                                "experiment file (experiments/X.py[:arg]); --config.FIELD=VALUE overrides")
flags.DEFINE_string("mesh", "", "named mesh from swerl_jax.meshes (default: the config's mesh.name)")
flags.DEFINE_string("model", "", "model registry name (default: the config's model.name)")
flags.DEFINE_enum("mode", "rl", ["rl", "sft"], "which trainer's batch to plan")
flags.DEFINE_float("usable", 0.9, "fraction of HBM the runtime leaves to the program (XLA_PYTHON_CLIENT_MEM_FRACTION)")
flags.DEFINE_bool("all", False, "one line per mesh x {llama3.2-1b, llama3.1-8b, llama3.3-70b}")
flags.DEFINE_bool("split", False, "print only the trainer's memory-split overrides (launch scripts read them); "
                  "exits 1 when the roles do not fit together")


PROG = "launch/plan.py"


def main(argv: list[str]) -> None:
    """The command: the plan of `--config` on `--mesh` (or every mesh with `--all`)."""
    del argv
    start = time.perf_counter()
    config = FLAGS.config
    with one_line_input_errors(PROG):  # the user's flags and config; the planning below raises as bugs do
        checked = config.copy_and_resolve_references()
        checked.mesh.name = FLAGS.mesh or checked.mesh.name  # checked on the mesh being planned
        if not FLAGS.all:
            resolve_config(checked, check_files=False)  # what the trainer refuses at load time fails here too
            sharding.mesh_axis_sizes(checked, get_mesh_spec(checked.mesh.name).num_devices)
            _ = get_model_config(FLAGS.model) if FLAGS.model else None
        work = workload_from_config(config, FLAGS.mode)
    if FLAGS.split:
        plan = make_plan(config, FLAGS.mesh or config.mesh.name, FLAGS.model or None, "rl", FLAGS.usable)
        if not plan.fits:
            print(format_plan(plan, work), file=sys.stderr)
            sys.exit(1)
        print(plan.split_flags())
        return
    if FLAGS.all:
        print(f"{'mesh':<14}{'model':<15}{'train GiB':>10}{'sampler GiB':>12}{'HBM GiB':>9}  verdict")
        for mesh in MESHES:
            for model in PLAN_MODELS:
                plan = make_plan(config, mesh, model, FLAGS.mode, FLAGS.usable)
                ok = plan.fits and not any(n.startswith("invalid") for n in plan.notes)
                print(f"{mesh:<14}{model:<15}{plan.total / GiB:>10.2f}{plan.rows['sampler total'] / GiB:>12.2f}"
                      f"{plan.hbm / GiB:>9.1f}  {'fits' if ok else 'does not fit'}")
    else:
        plan = make_plan(config, FLAGS.mesh or config.mesh.name, FLAGS.model or None, FLAGS.mode, FLAGS.usable)
        print(format_plan(plan, work))
    print(f"(planned in {time.perf_counter() - start:.1f} s from abstract shapes)")


if __name__ == "__main__":
    app.run(main, flags_parser=absl_flags_parser(PROG))
