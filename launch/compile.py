"""Compile the real train step and the sampler's steps for a TPU slice on a machine without one (deviceless).

    python launch/compile.py --config=experiments/swerl_llama3_70b.py --topology=v5p-512
    python launch/compile.py --config=experiments/sft_llama3_70b.py --topology=v5p-512 --mode=sft
    python launch/compile.py --config=experiments/swerl_llama3_70b.py --topology=v5p-64 \
        --config.model.name=llama3.1-8b --out=/tmp/compile_8b
    python launch/compile.py --config=experiments/deepswe_agent.py --topology=v5p-64 \
        --config.mesh.shape.tensor=4 --programs=train,decode --attention=pallas   # Qwen3-32B (4 min on 2 cores)

libtpu (the version jax's `tpu` extra pins; `pip install -e .[dev]` installs it) compiles for a TPU topology
from any host: `jax.experimental.topologies.get_topology_desc` gives abstract chips, the mesh is built over
them exactly as the trainer builds it (`sharding.create_mesh`), and parameters, optimizer state and batches
are `ShapeDtypeStruct`s carrying their shardings, so nothing is materialised. Compiled per program:

- train: `train_step.make_train_step` over the GRPO loss (`rl.trainer.make_rl_loss`: KL reference log-probs
  when rl.kl_coef > 0) or the SFT loss, with the config's optimizer, micro-batches and remat: the function
  the trainers run, at the longest prompt + completion the config allows, for one optimizer update (a step's
  rows over rl.ppo_minibatches, with their loss scale and, decoupled, the proximal log-probs);
- prefill: the sampler's prompt pass (`Llama` with a KV cache of `data.max_prompt_len` slots, as
  `sampler.core.prefill` runs it) for `sampler.max_batch` prompts;
- decode: one `sampler.decode.decode_step` token for `sampler.max_batch` rows over a full-length cache;
- decode_grpo (opt-in, `--programs=...,decode_grpo`): one `decode_step_shared` token, the engine's path for GRPO
  groups (each prompt's K/V once, `rl.num_samples` rows reading it).

Reported per chip: XLA's argument / output / temporary / alias bytes beside the planner's estimate
(`launch/plan.py`), the cost analysis' FLOPs and bytes, a roofline step time (the larger of FLOPs / peak and
bytes / HBM bandwidth, from `swerl_jax.meshes`) and the MFU bound it implies, and the collectives in the
compiled HLO by kind. XLA's cost analysis counts a loop body once (the layer scan, micro-batches, the
decode-step layers are unrolled), so the roofline uses analytic model FLOPs (`model_flops`) scaled from XLA's
figure when they disagree; both are printed. Each program's HLO text and a JSON of the numbers are saved under --out.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from absl import app, flags
from jax.sharding import NamedSharding, PartitionSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from launch import plan  # noqa: E402
from launch.compile_report import GiB, analyse, collectives, format_report, model_flops  # noqa: E402, F401
from launch.train_shapes import train_batch, train_info  # noqa: E402
from swerl_jax import sharding  # noqa: E402
from swerl_jax.cli import absl_flags_parser, one_line_input_errors  # noqa: E402
from swerl_jax.meshes import MESHES, MeshSpec, multislice_spec  # noqa: E402
from swerl_jax.model.config import LlamaConfig  # noqa: E402
from swerl_jax.model.llama import KVCache, Llama, positions_from_mask  # noqa: E402
from swerl_jax.optim import make_optimizer  # noqa: E402
from swerl_jax.policy import model_config_from  # noqa: E402
from swerl_jax.resolve import resolve_config  # noqa: E402
from swerl_jax.rl.objectives import GRPOLossConfig  # noqa: E402
from swerl_jax.rl.trainer import make_rl_loss  # noqa: E402
from swerl_jax.sampler.decode import decode_step, decode_step_shared, decode_weights  # noqa: E402
from swerl_jax.sft.trainer import make_sft_loss  # noqa: E402
from swerl_jax.train_step import TrainState, make_train_step, state_shardings  # noqa: E402


def tpu_mesh_spec(topology: str) -> MeshSpec:
    """The named TPU mesh for `--topology` ("v5p-512" or "tpu-v5p-512"); a clear error lists the known ones."""
    name = topology if topology.startswith("tpu-") else f"tpu-{topology}"
    known = [m.removeprefix("tpu-") for m, s in MESHES.items() if s.topology]
    if name not in MESHES or not MESHES[name].topology:
        raise KeyError(f"--topology={topology!r} is not a TPU mesh in swerl_jax.meshes; known: {', '.join(known)}")
    return MESHES[name]


def topology_devices(spec: MeshSpec, num_slices: int = 1) -> list[Any]:
    """Abstract TPU devices of `num_slices` slices of `spec.topology` (needs libtpu; no TPU needed)."""
    from jax.experimental import topologies

    # Compiling takes no chip: let several compiles (and any process that loaded libtpu) share the library
    # instead of failing on libtpu's one-process-per-host lockfile.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        topo = topologies.get_topology_desc(topology_name=spec.topology, platform="tpu",
                                            **({"num_slices": num_slices} if num_slices > 1 else {}))
    except Exception as err:  # libtpu missing or too old: say what to install
        raise RuntimeError(f"cannot describe TPU topology {spec.topology!r} ({err}); install libtpu "
                           "(pip install -e .[dev], or pip install 'libtpu==0.0.42.*' for jax 0.10.2)") from err
    return list(topo.devices)


def _sds(tree: Any, shardings: Any) -> Any:
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def abstract_train_state(model_config: LlamaConfig, mesh: Any, rules: sharding.Rules, optimizer: Any
                         ) -> tuple[TrainState, TrainState]:
    """(state, shardings) as the trainer lays them out, every leaf a sharded ShapeDtypeStruct (no memory)."""
    p_shard = sharding.param_shardings(model_config, mesh, rules)
    params = jax.tree.map(lambda b: b.value, sharding.abstract_params(model_config),
                          is_leaf=lambda x: hasattr(x, "names"))
    shardings = state_shardings(optimizer, p_shard, params, mesh)
    state = jax.eval_shape(lambda p: TrainState(jnp.zeros((), jnp.int32), p, optimizer.init(p)), params)
    return _sds(state, shardings), shardings


def lower_train(config: Any, mode: str, model_config: LlamaConfig, mesh: Any, rules: sharding.Rules) -> Any:
    """The trainer's jitted step (loss, micro-batches, optimizer, donation), lowered on abstract inputs."""
    batch, p, c = train_batch(config, mode)
    info = train_info(config, mode)
    rows, num_micro = info["rows"], info["num_micro_batches"]
    sharding.validate_mesh(config, model_config, mesh.size, global_batch=rows)  # names the axis and the batch
    if mode == "sft":
        steps, lr = int(config.sft.num_steps), float(config.sft.learning_rate)
        loss_fn = make_sft_loss(model_config, p, c)
    else:
        steps, lr = int(config.rl.num_steps) * int(config.rl.update_epochs) * int(config.rl.ppo_minibatches), None
        loss_fn = make_rl_loss(model_config, GRPOLossConfig.from_config(config), p, c,
                               float(config.sampler.temperature) or 1.0)
    optimizer = make_optimizer(config.optim, max(1, steps), lr)
    state, shardings = abstract_train_state(model_config, mesh, rules, optimizer)
    batch_sh = sharding.batch_shardings(mesh, batch, rules)
    step = make_train_step(loss_fn, optimizer, mesh, shardings, batch_sh, rules, num_micro_batches=num_micro,
                           weight_key="loss_weight")
    return step.lower(state, _sds(batch, batch_sh)), info


def _sampler_params(model_config: LlamaConfig, mesh: Any, rules: sharding.Rules) -> tuple[Any, Any]:
    """The sampler's params: the policy's layout, in the compute dtype (the sampler publishes them so)."""
    sampler_model = model_config.replace(param_dtype=model_config.dtype)
    shardings = sharding.param_shardings(sampler_model, mesh, rules)
    params = jax.tree.map(lambda b: b.value, sharding.abstract_params(sampler_model),
                          is_leaf=lambda x: hasattr(x, "names"))
    return _sds(params, shardings), shardings


def sampler_rows(config: Any, mesh: Any, rules: sharding.Rules) -> int:
    """`sampler.max_batch` rounded up to a multiple of the batch shards (one row per chip at least), as the
    planner plans the sampler: a slice decodes at least as many sequences as it has batch shards."""
    shards = 1
    for axis in sharding._mesh_axes(dict(rules).get("activation_batch")):
        shards *= mesh.shape[axis]
    return -(-int(config.sampler.max_batch) // shards) * shards


def lower_prefill(config: Any, model_config: LlamaConfig, mesh: Any, rules: sharding.Rules) -> tuple[Any, dict]:
    """The sampler's prompt pass for `sampler.max_batch` prompts of `data.max_prompt_len` tokens, lowered."""
    rows, t = sampler_rows(config, mesh, rules), int(config.data.max_prompt_len)
    params, p_shard = _sampler_params(model_config, mesh, rules)
    bs = NamedSharding(mesh, sharding.batch_spec(rules, 2))
    cache_spec = PartitionSpec(None, dict(rules).get("activation_batch"), None, dict(rules).get("kv_heads"), None)
    cache_sh = KVCache(NamedSharding(mesh, cache_spec), NamedSharding(mesh, cache_spec))

    def prefill(params: Any, tokens: jax.Array, mask: jax.Array) -> tuple[jax.Array, KVCache]:
        model = Llama(model_config)
        cache = KVCache.zeros(model_config, rows, t)
        hidden, cache = model.apply({"params": params}, tokens, positions_from_mask(mask), mask, cache, 0,
                                    return_hidden=True)
        # hidden[:, -1:] keeps the [batch, length, ...] rank the logical constraints name
        return model.apply({"params": params}, hidden[:, -1:], method=Llama.logits)[:, 0], cache

    jitted = jax.jit(prefill, in_shardings=(p_shard, bs, bs), out_shardings=(None, cache_sh))
    with sharding.mesh_context(mesh, rules):
        lowered = jitted.lower(params, jax.ShapeDtypeStruct((rows, t), jnp.int32, sharding=bs),
                               jax.ShapeDtypeStruct((rows, t), jnp.bool_, sharding=bs))
    return lowered, {"rows": rows, "prompt_len": t}


def lower_decode(config: Any, model_config: LlamaConfig, mesh: Any, rules: sharding.Rules) -> tuple[Any, dict]:
    """One `decode_step` token for `sampler.max_batch` rows over a cache of prompt + max_new_tokens slots.

    The fused decode weights are built once per generate call (`decode_weights`), so they are an input here,
    laid out as XLA chose when compiling `decode_weights` from the sharded params.
    """
    rows = sampler_rows(config, mesh, rules)
    slots = int(config.data.max_prompt_len) + int(config.sampler.max_new_tokens)
    params, p_shard = _sampler_params(model_config, mesh, rules)
    with sharding.mesh_context(mesh, rules):
        fuse = jax.jit(lambda p: decode_weights(model_config, p), in_shardings=(p_shard,))
        weights_sh = fuse.lower(params).compile().output_shardings
    weights = _sds(jax.eval_shape(lambda p: decode_weights(model_config, p), params), weights_sh)
    batch_axes, kv_axes = dict(rules).get("activation_batch"), dict(rules).get("kv_heads")
    kv, d, dt = model_config.num_kv_heads, model_config.head_size, jnp.dtype(model_config.dtype)
    k_sh = NamedSharding(mesh, PartitionSpec(batch_axes, kv_axes, None, None))
    cache = tuple(KVCache(jax.ShapeDtypeStruct((rows, kv, d, slots), dt, sharding=k_sh),
                          jax.ShapeDtypeStruct((rows, kv, slots, d), dt, sharding=k_sh))
                  for _ in range(model_config.num_layers))
    row_sh = NamedSharding(mesh, sharding.batch_spec(rules, 1))
    mask_sh = NamedSharding(mesh, sharding.batch_spec(rules, 2))
    jitted = jax.jit(lambda w, tok, pos, m, c, s: decode_step(model_config, w, tok, pos, m, c, s),
                     donate_argnums=(4,))
    with sharding.mesh_context(mesh, rules):
        lowered = jitted.lower(weights, jax.ShapeDtypeStruct((rows,), jnp.int32, sharding=row_sh),
                               jax.ShapeDtypeStruct((rows,), jnp.int32, sharding=row_sh),
                               jax.ShapeDtypeStruct((rows, slots), jnp.bool_, sharding=mask_sh), cache,
                               jax.ShapeDtypeStruct((), jnp.int32))
    return lowered, {"rows": rows, "slots": slots}


def lower_decode_grpo(config: Any, model_config: LlamaConfig, mesh: Any, rules: sharding.Rules
                      ) -> tuple[Any, dict]:
    """One `decode_step_shared` token, the engine's path for GRPO groups: `sampler.max_batch` rows = prompts x
    `rl.num_samples`, each prompt's K/V once ([prompts, kv, head_dim, max_prompt_len]), each row's own
    `max_new_tokens` slots. Prompts are split over the batch shards when they divide evenly, else replicated."""
    samples = int(config.rl.num_samples)
    rows = sampler_rows(config, mesh, rules)
    rows = -(-rows // samples) * samples
    prompts, t, n = rows // samples, int(config.data.max_prompt_len), int(config.sampler.max_new_tokens)
    params, p_shard = _sampler_params(model_config, mesh, rules)
    with sharding.mesh_context(mesh, rules):
        fuse = jax.jit(lambda p: decode_weights(model_config, p), in_shardings=(p_shard,))
        weights_sh = fuse.lower(params).compile().output_shardings
    weights = _sds(jax.eval_shape(lambda p: decode_weights(model_config, p), params), weights_sh)
    batch_axes, kv_axes = dict(rules).get("activation_batch"), dict(rules).get("kv_heads")
    shards = 1
    for axis in sharding._mesh_axes(batch_axes):
        shards *= mesh.shape[axis]
    prompt_axes = batch_axes if prompts % shards == 0 else None
    kv, d, dt = model_config.num_kv_heads, model_config.head_size, jnp.dtype(model_config.dtype)
    own_sh = NamedSharding(mesh, PartitionSpec(batch_axes, kv_axes, None, None))
    pre_sh = NamedSharding(mesh, PartitionSpec(prompt_axes, kv_axes, None, None))
    cache = tuple((KVCache(jax.ShapeDtypeStruct((prompts, kv, d, t), dt, sharding=pre_sh),
                           jax.ShapeDtypeStruct((prompts, kv, t, d), dt, sharding=pre_sh)),
                   KVCache(jax.ShapeDtypeStruct((rows, kv, d, n), dt, sharding=own_sh),
                           jax.ShapeDtypeStruct((rows, kv, n, d), dt, sharding=own_sh)))
                  for _ in range(model_config.num_layers))
    row_sh = NamedSharding(mesh, sharding.batch_spec(rules, 1))
    jitted = jax.jit(lambda w, tok, pos, m, c, s: decode_step_shared(model_config, w, tok, pos, m, c, s),
                     donate_argnums=(4,))
    with sharding.mesh_context(mesh, rules):
        lowered = jitted.lower(weights, jax.ShapeDtypeStruct((rows,), jnp.int32, sharding=row_sh),
                               jax.ShapeDtypeStruct((rows,), jnp.int32, sharding=row_sh),
                               jax.ShapeDtypeStruct((prompts, t), jnp.bool_,
                                                    sharding=NamedSharding(mesh, PartitionSpec(prompt_axes, None))),
                               cache, jax.ShapeDtypeStruct((), jnp.int32))
    return lowered, {"rows": rows, "prompts": prompts, "slots": t + n}


def planner_rows(config: Any, mode: str, spec: MeshSpec, model_config: LlamaConfig, n_devices: int,
                 info: dict) -> dict[str, int]:
    """The planner's estimate (`plan.estimate`) for exactly the compiled workload."""
    sizes = sharding.mesh_axis_sizes(config, n_devices)
    rules = sharding.logical_axis_rules(config)
    work = plan.Workload(micro_batch=info["rows"] // info["num_micro_batches"],
                         seq_len=info["prompt_len"] + info["loss_len"], loss_len=info["loss_len"],
                         sampler_batch=int(config.sampler.max_batch),
                         sampler_len=int(config.data.max_prompt_len) + int(config.sampler.max_new_tokens))
    return plan.estimate(model_config, sizes, rules, work, micro_batches=info["num_micro_batches"])


PROGRAMS = ("train", "prefill", "decode", "decode_grpo")


def check_programs(programs: tuple[str, ...], attention: str | None) -> None:
    """ValueError naming a program or an attention kernel this tool cannot compile, before minutes of compiling
    the known ones."""
    unknown = [name for name in programs if name not in PROGRAMS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], PROGRAMS, n=1)
        raise ValueError(f"--programs: unknown program {unknown[0]!r}" + (f" (did you mean {close[0]!r}?)" if close
                                                                          else "") + f"; known: {', '.join(PROGRAMS)}")
    if attention not in (None, "", "xla", "pallas"):
        raise ValueError(f"--attention={attention!r}: '' (XLA) or 'pallas' compile for TPU")


def compile_all(config: Any, topology: str, mode: str = "rl", programs: tuple[str, ...] = PROGRAMS,
                out_dir: Path | None = None, num_slices: int = 1, attention: str | None = None) -> dict[str, Any]:
    """Compile `programs` for the TPU slice `topology` with `config`; returns the report (see `analyse`).

    `attention` replaces model.attention_impl ("" = XLA, "pallas"); by default a "cudnn" config (GPU only)
    compiles with XLA attention."""
    spec = tpu_mesh_spec(topology)
    check_programs(programs, attention)
    config = config.copy_and_resolve_references()
    config.mesh.name = spec.name
    config.model.hf_dir = ""  # the architecture is model.name's; no checkpoint is read to compile
    if attention is not None:
        config.model.attention_impl = attention or None
    elif config.model.get("attention_impl") == "cudnn":  # a GPU config: cuDNN does not exist on TPU
        config.model.attention_impl = None
    dcn = {a: int(v) for a, v in dict(config.mesh.get("dcn_shape") or {}).items()}
    config_slices = 1
    for size in dcn.values():
        config_slices *= max(size, 1)
    if config_slices > 1 and num_slices == 1:
        num_slices = config_slices  # multi-slice where the config says so: mesh.dcn_shape splits axes over DCN
    elif num_slices > 1 and config_slices == 1:
        config.mesh.dcn_shape.data = num_slices  # --num_slices alone: data parallelism across the slices
    elif num_slices != config_slices:
        raise ValueError(f"--num_slices={num_slices} but mesh.dcn_shape {dcn} spans {config_slices} slices")
    devices = topology_devices(spec, num_slices)
    config.mesh.name = multislice_spec(spec.name, num_slices).name  # the mesh of all slices' chips
    model_config = model_config_from(config)
    mesh = sharding.create_mesh(config, devices=devices, model_config=model_config)
    rules = sharding.logical_axis_rules(config)
    n = len(devices)
    report = {"topology": spec.topology, "slices": num_slices, "mesh": config.mesh.name, "devices": n,
              "model": config.model.name,
              "mesh_shape": dict(mesh.shape), "attention_impl": model_config.attention_impl,
              "remat": model_config.remat, "programs": {}}
    rows = planner_rows(config, mode, spec, model_config, n, train_info(config, mode))
    report["planner"] = rows
    for name in programs:
        if name == "train":
            lowered, info = lower_train(config, mode, model_config, mesh, rules)
            planned = rows["train total"]
            seq = info["prompt_len"] + info["loss_len"]
            flops = model_flops(model_config, info["rows"], seq, info["loss_len"], True, model_config.remat)
            useful = model_flops(model_config, info["rows"], seq, info["loss_len"], True, "none")
        elif name == "prefill":
            useful = None
            lowered, info = lower_prefill(config, model_config, mesh, rules)
            planned = None
            flops = model_flops(model_config, info["rows"], info["prompt_len"], 1, False, "none")
        elif name == "decode":
            useful = None
            lowered, info = lower_decode(config, model_config, mesh, rules)
            planned = rows["sampler total"]
            kv_read = 2 * model_config.num_heads * model_config.head_size * info["slots"] * model_config.num_layers
            flops = info["rows"] * (2 * (model_config.num_params() - model_config.vocab_size * model_config.hidden_size)
                                    + 2 * model_config.vocab_size * model_config.hidden_size + kv_read)
        elif name == "decode_grpo":
            useful = None
            lowered, info = lower_decode_grpo(config, model_config, mesh, rules)
            planned = None  # the planner models the copied-rows cache (an upper bound for this one)
            prompt_len, new_len = int(config.data.max_prompt_len), int(config.sampler.max_new_tokens)
            kv_read = 2 * model_config.num_heads * model_config.head_size * model_config.num_layers * (
                info["prompts"] * prompt_len / info["rows"] + new_len)
            flops = info["rows"] * (2 * (model_config.num_params() - model_config.vocab_size * model_config.hidden_size)
                                    + 2 * model_config.vocab_size * model_config.hidden_size + kv_read)
        else:
            raise ValueError(f"unknown program {name!r}; known: {', '.join(PROGRAMS)}")
        result = analyse(name, lowered, spec, planned, flops, n, out_dir, useful)
        result.update(info)
        report["programs"][name] = result
    if out_dir is not None:
        (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    return report


FLAGS = flags.FLAGS  # --config (with --config.FIELD=VALUE overrides) and --mode are launch/plan.py's flags
flags.DEFINE_string("topology", "v5p-512", "TPU slice: a tpu-* mesh of swerl_jax.meshes without the prefix")
flags.DEFINE_integer("num_slices", 1, "slices joined by DCN; default: the product of config.mesh.dcn_shape "
                     "(alone, it makes mesh.dcn_shape.data = num_slices)")
flags.DEFINE_list("programs", ["train", "prefill", "decode"], "programs to compile")
flags.DEFINE_string("attention", None, "model.attention_impl for TPU: '' (XLA) or pallas (default: the config's; "
                    "cudnn becomes XLA)")
flags.DEFINE_string("out", "", "directory for the HLO text and JSON (default: /tmp/swerl_compile/<mesh>-<model>)")


PROG = "launch/compile.py"


def main(argv: list[str]) -> None:
    """The command: compile `--programs` for `--topology` and print the report."""
    del argv
    config = FLAGS.config
    with one_line_input_errors(PROG):  # the flags and config; compiling below raises as bugs do
        spec = tpu_mesh_spec(FLAGS.topology)
        check_programs(tuple(FLAGS.programs), FLAGS.attention)
        checked = config.copy_and_resolve_references()
        checked.mesh.name = spec.name
        resolve_config(checked, check_files=False)
    out = Path(FLAGS.out or f"/tmp/swerl_compile/{spec.name}-{config.model.name}-{FLAGS.mode}")
    report = compile_all(config, FLAGS.topology, FLAGS.mode, tuple(FLAGS.programs), out, FLAGS.num_slices,
                         FLAGS.attention)
    print(format_report(report))
    print(f"(HLO and JSON in {out})")


if __name__ == "__main__":
    app.run(main, flags_parser=absl_flags_parser(PROG))

