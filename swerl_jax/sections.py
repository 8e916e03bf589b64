"""The experiment config as typed sections: one frozen dataclass per top-level key of `experiments/base.py`.

    exp = read_sections(config)     # ConfigDict -> Experiment; TypeError / KeyError / ValueError name the key
    exp.rl.kl_coef                  # a float, whatever the command line wrote (an int 0 becomes 0.0)
    exp.to_dict()                   # plain JSON-ready dict, the same tree as config.to_json()

Each field's type is checked (an int where a float belongs is widened; a string where a number belongs, a bool
where an int belongs, a missing key, a key no section defines: errors naming the key and the expected type), and
fields with a fixed set of values carry it (`choices`). No defaults here: every default lives in
`experiments/base.py`, so a config that lacks a key is refused, not silently completed. Cross-field and registry
checks (meshes, models, losses, files) are `swerl_jax.resolve.resolve_config`'s, which calls this first.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from typing import Any


def _choices(*values: str) -> Any:
    return dataclasses.field(metadata={"choices": values})


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """`model.*`: which Llama, its weights and tokenizer, dtypes, remat and attention kernel."""

    name: str
    hf_dir: str
    tokenizer: str
    param_dtype: str = _choices("float32", "bfloat16", "float16")
    dtype: str = _choices("float32", "bfloat16", "float16")
    remat: str
    attention_impl: str | None  # None (XLA) or a kernel of swerl_jax.model.attention (checked by config.py)


@dataclasses.dataclass(frozen=True)
class MeshSection:
    """`mesh.*`: a named mesh and per-axis overrides, the logical-axis rules, multi-process settings."""

    name: str
    shape: dict
    dcn_shape: dict
    logical_axis_rules: tuple
    coordinator_address: str
    num_processes: int
    process_id: int


@dataclasses.dataclass(frozen=True)
class DataSection:
    """`data.*`: PR record files (or synthetic records), prompt budget and style, the Grain pipeline."""

    train_files: str
    synthetic_num_records: int
    synthetic_repos: str
    testbed_families: str
    testbed_max_distractors: int
    testbed_package: str
    max_prompt_len: int
    rl_num_records: int
    shuffle: bool
    num_epochs: int
    worker_count: int
    prompt_style: str = _choices("swe_rl", "compact")
    generator: str = _choices("synthetic", "testbed")


@dataclasses.dataclass(frozen=True)
class RewardSection:
    """`reward.*`: the reward function and its worker pool."""

    kind: str
    num_workers: int
    timeout_s: float
    fallback_reward: float


@dataclasses.dataclass(frozen=True)
class SamplerSection:
    """`sampler.*`: where and how completions are generated."""

    mode: str = _choices("process", "inline")
    host: str
    port: int
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    max_batch: int
    prompts_per_request: int
    request_timeout_s: float
    cpus: str
    devices: str
    memory_fraction: float
    num_processes: int
    weights_dir: str
    partial_rollouts: bool
    partial_segment: int


@dataclasses.dataclass(frozen=True)
class RLSection:
    """`rl.*`: GRPO and its ablations (advantage, clipping, KL, aggregation, filtering)."""

    task: str = _choices("repair", "agent")
    num_steps: int
    prompts_per_step: int
    num_samples: int
    advantage: str
    std_eps: float
    std_ddof: int
    clip_eps_low: float
    clip_eps_high: float
    dual_clip: float
    kl_coef: float
    kl_estimator: str
    loss_agg: str
    imports: tuple
    loss_norm: int
    entropy_coef: float
    compact_filtering: bool
    seq_mean_rows: str = _choices("active", "all")
    baseline_excludes_filtered: bool
    dynamic_sampling: bool
    dynamic_sampling_max_draws: int
    old_logprobs: str = _choices("sampler", "recompute")
    off_policy: str = _choices("plain", "decoupled")
    behav_weight_cap: float
    mismatch_correction: str = _choices("off", "tis", "mis")
    mismatch_cap: float
    micro_batch_size: int
    update_epochs: int
    ppo_minibatches: int
    max_staleness: int
    trainer_cpus: str
    trainer_memory_fraction: float
    seed: int
    warmup_steps: int


@dataclasses.dataclass(frozen=True)
class OptimSection:
    """`optim.*`: Adam, its schedule and clipping (shared by RL and SFT)."""

    learning_rate: float
    warmup_steps: int
    schedule: str
    b1: float
    b2: float
    weight_decay: float
    grad_clip: float
    grad_accum_steps: int
    eps: float
    final_lr_ratio: float
    skip_nonfinite: int


@dataclasses.dataclass(frozen=True)
class SFTSection:
    """`sft.*`: the SFT baseline (and the demo's warm start)."""

    num_steps: int
    batch_size: int
    max_len: int
    learning_rate: float
    micro_batch_size: int
    prompt_loss_weight: float
    pack: bool


@dataclasses.dataclass(frozen=True)
class EvalSection:
    """`eval.*`: held-out repair evaluation during GRPO."""

    every_steps: int
    records: str
    num_records: int
    heldout_seed: int
    families: str
    reward_kind: str


@dataclasses.dataclass(frozen=True)
class AgentSection:
    """`agent.*`: multi-turn episodes for rl.task = "agent" (tasks, reward, limits, environment workers)."""

    instances: str
    repos: str
    reward: str = _choices("execution", "similarity")
    max_turns: int
    max_context: int
    timeout_s: float
    step_timeout_s: float
    env_workers: int
    waves: int
    stream_ahead_batches: int
    compact_prompt: bool
    kv_cache: str = _choices("reprefill", "kept")
    eval_tasks: int
    eval_instances: str
    error_credit: str = _choices("episode", "until_error")
    test_infra_unresolved: bool
    memory_mb: int
    processes: int
    disk_mb: int
    file_mb: int
    tmp_mb: int
    shm_mb: int


@dataclasses.dataclass(frozen=True)
class CheckpointSection:
    """`checkpoint.*`: how often and how many Orbax steps are kept."""

    every_steps: int
    max_to_keep: int
    async_save: bool


@dataclasses.dataclass(frozen=True)
class LoggingSection:
    """`logging.*`: metrics cadence, TensorBoard, rollout files, the progress bar."""

    every_steps: int
    tensorboard: bool
    save_rollouts: bool
    progress_bar: bool


@dataclasses.dataclass(frozen=True)
class Experiment:
    """The whole experiment config, typed (`read_sections`)."""

    seed: int
    model: ModelSection
    mesh: MeshSection
    data: DataSection
    reward: RewardSection
    sampler: SamplerSection
    rl: RLSection
    optim: OptimSection
    sft: SFTSection
    eval: EvalSection
    agent: AgentSection
    checkpoint: CheckpointSection
    logging: LoggingSection

    def to_dict(self) -> dict:
        """Plain nested dict (tuples as lists), the same tree `ConfigDict.to_json` writes."""
        return _plain(dataclasses.asdict(self))

    def to_json(self, indent: int | None = None) -> str:
        """JSON of `to_dict` (what the trainer hands the sampler process; `read_sections` reads it back)."""
        return json.dumps(self.to_dict(), indent=indent)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x


def _as_plain(value: Any) -> Any:
    """ConfigDicts, FieldReferences and tuples as plain Python (dicts, tuples)."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {k: _as_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return tuple(_as_plain(v) for v in value)
    return value


_TYPE_NAMES = {int: "an int", float: "a number", str: "a string", bool: "a bool", dict: "a mapping",
               tuple: "a sequence"}


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """`value` as the field's type, or TypeError naming `key` and both types."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional, annotation = True, args[0]
    if value is None:
        if optional:
            return None
        raise TypeError(f"config key {key}: expected {_TYPE_NAMES[annotation]}, got None")
    ok = {int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, int | float) and not isinstance(value, bool),
          str: isinstance(value, str), bool: isinstance(value, bool),
          dict: isinstance(value, dict), tuple: isinstance(value, tuple)}[annotation]
    if not ok:
        raise TypeError(f"config key {key}: expected {_TYPE_NAMES[annotation]}, got {type(value).__name__} "
                        f"{value!r}")
    if annotation is dict:
        for axis, size in value.items():
            _coerce(f"{key}.{axis}", size, int)
    return float(value) if annotation is float else value


def _section(name: str, cls: type, raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise TypeError(f"config key {name}: expected a section (mapping), got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(fields), n=1, cutoff=0.6)
        hint = f"; did you mean {name}.{close[0]}?" if close else ""
        raise KeyError(f"unknown config key {name}.{unknown[0]}{hint}")
    values = {}
    for field_name, f in fields.items():
        key = f"{name}.{field_name}"
        if field_name not in raw:
            raise KeyError(f"config key {key} is missing (every key is defined in experiments/base.py)")
        value = _coerce(key, raw[field_name], hints[field_name])
        choices = f.metadata.get("choices")
        if choices and value is not None and value not in choices:
            raise ValueError(f"{key}={value!r} is not one of {list(choices)}")
        values[field_name] = value
    return cls(**values)


def read_sections(config: Any) -> Experiment:
    """An experiment ConfigDict (or plain dict) as typed `Experiment` sections; errors name the key."""
    raw = _as_plain(config)
    hints = typing.get_type_hints(Experiment)
    unknown = sorted(set(raw) - set(hints))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(hints), n=1, cutoff=0.6)
        raise KeyError(f"unknown config key {unknown[0]}" + (f"; did you mean {close[0]}?" if close else ""))
    out = {}
    for name, cls in hints.items():
        if name not in raw:
            raise KeyError(f"config key {name} is missing (every key is defined in experiments/base.py)")
        out[name] = _coerce(name, raw[name], int) if cls is int else _section(name, cls, raw[name])
    return Experiment(**out)
