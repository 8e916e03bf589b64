"""The experiment config, resolved once at each entry point before anything starts: the ConfigDict becomes typed
sections (`sections.read_sections`: keys, types and each section's fixed value sets), then the checks that need
the domains run here: registry names (models, meshes, schedules, attention kernels, reward functions), the loss
config, batch and mesh shapes, the agent's limits, and the files a run reads. Keys and values no trainer can run
fail at load time, naming the key. `python -m swerl_jax.train`, the sampler server, `eval.run`, `eval.repair_score`,
`eval.tts`, the sweep and `launch/plan.py` call it; the trainers take its result.

    exp = resolve_config(config)                       # Experiment; TypeError / KeyError / ValueError name the key
    start_warnings(exp)                                # lines for settings that run but will not do what they seem
    exp.rl.kl_coef, exp.sampler.mode                   # typed: float, one of ("process", "inline")

This module sits above the domains it checks against; `swerl_jax.config` (loading) and `swerl_jax.sections`
(typing) sit below everything.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import numpy as np

from swerl_jax import sharding
from swerl_jax.config import did_you_mean, load_experiment_config
from swerl_jax.data.paths import config_path, expand_record_paths, user_path
from swerl_jax.meshes import MESHES
from swerl_jax.model.attention import IMPLEMENTATIONS
from swerl_jax.model.config import FROM_CHECKPOINT, MODEL_CONFIGS
from swerl_jax.optim import SCHEDULES
from swerl_jax.policy import micro_batches
from swerl_jax.reward.functions import get_reward_fn
from swerl_jax.rl.advantages import ADVANTAGE_ESTIMATORS
from swerl_jax.rl.collector import prompt_share
from swerl_jax.rl.kl import KL_ESTIMATORS
from swerl_jax.rl.minibatch import check_minibatches
from swerl_jax.rl.objectives import LOSS_AGGREGATORS, GRPOLossConfig, group_advantages
from swerl_jax.rl.registry import import_origins, origins
from swerl_jax.runs.affinity import check_memory_split, cpu_shares, fleet_placement, parse_cpus
from swerl_jax.sampler.types import sampling_params
from swerl_jax.sections import Experiment, read_sections
from swerl_jax.testbed.tasks import generate_tasks, parse_families
from swerl_jax.tokenizer import NAMED_TOKENIZERS


def resolve_config(config: Any, check_files: bool = True) -> Experiment:
    """The experiment config as typed sections, every check done (`read_sections`, then `validate_config`).

    Idempotent: an `Experiment` is checked again and returned. Nothing here imports a model, touches a device or
    compiles, so a wrong config fails in well under a second.
    """
    exp = config if isinstance(config, Experiment) else read_sections(config)
    exp = with_registry_imports(exp)
    validate_config(exp, check_files=check_files)
    return exp


def with_registry_imports(exp: Experiment) -> Experiment:
    """`exp` after importing its `rl.imports` (where the user-registered rl.* functions it names live: a sampler
    process reading config.json has not executed the user's file), with `rl.imports` holding the origins of every
    registered function it names (`rl.registry.origins`), so the config.json written from it carries them."""
    rl = exp.rl
    import_origins(rl.imports)
    found = origins(((ADVANTAGE_ESTIMATORS, str(rl.advantage)), (KL_ESTIMATORS, str(rl.kl_estimator)),
                     (LOSS_AGGREGATORS, str(rl.loss_agg))))
    imports = tuple(rl.imports) + tuple(o for o in found if o not in rl.imports)
    if imports == tuple(rl.imports):
        return exp
    return dataclasses.replace(exp, rl=dataclasses.replace(rl, imports=imports))


# Config keys that name a folder or file to read (resolved as data.* paths are), and one the run writes.
INPUT_PATH_KEYS = ("model.hf_dir", "model.tokenizer", "agent.instances", "agent.repos", "agent.eval_instances")
OUTPUT_PATH_KEYS = ("sampler.weights_dir",)


def absolute_paths(config: Any) -> Any:
    """Make the path keys of an experiment ConfigDict absolute, once, at the entry point (before `resolve_config`):
    an input from the current directory, else the repository root (`data.paths.config_path`), an output from the
    current directory; registry names ('smollm2', 'testbed') stay. A sampler process, Orbax (which refuses
    relative paths) and a resume from another directory then all read the same folder. Returns `config`."""
    for key in INPUT_PATH_KEYS + OUTPUT_PATH_KEYS:
        section, field = key.split(".")
        value = str(getattr(getattr(config, section), field) or "")
        if value and value not in NAMED_TOKENIZERS and not os.path.isabs(value):
            setattr(getattr(config, section), field,
                    user_path(value) if key in OUTPUT_PATH_KEYS else config_path(value))
    return config


def ensure_resolved(config: Any) -> Experiment:
    """`config` as an `Experiment`: one that an entry point already resolved is taken as it is (resolved once per
    entry point, not again by every layer it passes through); a ConfigDict or dict is resolved here."""
    return config if isinstance(config, Experiment) else resolve_config(config)


def validate_config(config: Any, check_files: bool = True) -> None:
    """Checks that need no devices, run at load time (trainers, launch/plan.py); ValueError names the key.

    `check_files` also checks that the files and directories the run reads exist (data.train_files,
    model.hf_dir, model.tokenizer: FileNotFoundError / ValueError naming the key); the planner skips it, as a
    paper config is planned on machines that do not hold its data.

    The loss config (`GRPOLossConfig.validate`), the advantage estimator on G samples (a group-relative
    estimator needs rl.num_samples >= 2: with one sample every group has zero variance and nothing trains),
    and the micro-batch sizes against their batches. A ConfigDict or dict is typed first (`read_sections`: its
    keys, types and fixed value sets).
    """
    config = config if isinstance(config, Experiment) else read_sections(config)
    rl = config.rl
    for key, steps in (("sft.num_steps", config.sft.num_steps), ("rl.num_steps", rl.num_steps)):
        if int(steps) < 0:  # a negative count skipped its stage without a word
            raise ValueError(f"{key} must be >= 0 (0: no such stage), got {steps}")
    if int(rl.num_steps) > 0:
        sampling_params(config)  # the sampler's values, before SFT spends its time (the sampler checked them after)
        if int(rl.num_samples) < 2:
            raise ValueError(f"rl.num_samples={rl.num_samples}: rl.num_samples must be >= 2 (a group-relative "
                             "advantage compares the samples of a prompt: with 1, every group has zero variance "
                             "and the loss is 0)")
        if int(rl.update_epochs) < 1:
            raise ValueError(f"rl.update_epochs must be >= 1, got {rl.update_epochs}")
        GRPOLossConfig.from_config(config)
        check_minibatches(int(rl.prompts_per_step) * int(rl.num_samples), int(rl.ppo_minibatches),
                          int(rl.micro_batch_size))
        if int(config.mesh.num_processes) > 1:  # known before any process starts: fail before SFT (issue 57 item 6)
            prompt_share(int(rl.prompts_per_step), int(config.mesh.num_processes))
        group_advantages(np.zeros((1, int(rl.num_samples))), str(rl.advantage), float(rl.std_eps), int(rl.std_ddof))
        micro_batches(int(rl.prompts_per_step) * int(rl.num_samples), int(rl.micro_batch_size), "rl.micro_batch_size")
        if rl.baseline_excludes_filtered and not rl.compact_filtering:
            raise ValueError("rl.baseline_excludes_filtered=True needs rl.compact_filtering=True (it excludes the "
                             "compact-filtered samples)")
        _check_staleness(config)
    micro_batches(int(config.sft.batch_size), int(config.sft.micro_batch_size), "sft.micro_batch_size")
    one_sequence_kernel = config.model.attention_impl in ("cudnn", "pallas")
    if bool(config.sft.pack) and (int(config.sft.micro_batch_size) or one_sequence_kernel):
        raise ValueError(f"sft.pack=True packs a batch into a varying number of rows, attending within each example: "
                         f"it needs sft.micro_batch_size=0 (got {config.sft.micro_batch_size}) and an attention kernel "
                         f"that takes any mask (model.attention_impl None, 'xla' or 'cudnn_masked'; got "
                         f"{config.model.attention_impl!r})")
    if not 0 <= float(config.sft.prompt_loss_weight) <= 1:
        raise ValueError(f"sft.prompt_loss_weight must be in [0, 1] (0: the answer only), got "
                         f"{config.sft.prompt_loss_weight}")
    if int(config.eval.every_steps) < 0 or (int(config.eval.every_steps) > 0 and int(config.eval.num_records) < 1):
        raise ValueError(f"eval.every_steps={config.eval.every_steps} / eval.num_records={config.eval.num_records}: "
                         "evaluation needs every_steps >= 0 and, when on, num_records >= 1 (eval.every_steps=0 turns "
                         "it off)")
    if int(config.rl.warmup_steps) < -1:
        raise ValueError(f"rl.warmup_steps must be >= 0, or -1 for optim.warmup_steps, got {config.rl.warmup_steps}")
    if int(config.rl.seed) < -1:
        raise ValueError(f"rl.seed must be >= 0, or -1 for `seed`, got {config.rl.seed}")
    if str(config.rl.task) == "agent":
        _check_agent(config)
    _check_batch_shards(config)
    _check_names(config)
    if check_files:
        _check_files(config)


def _check_staleness(config: Any) -> None:
    """rl.max_staleness, rl.off_policy and rl.old_logprobs fit together; the CPU lists parse."""
    rl = config.rl
    k = int(rl.max_staleness)
    if k < 0:
        raise ValueError(f"rl.max_staleness must be >= 0 (0: synchronous), got {k}")
    if str(rl.old_logprobs) == "recompute" and (k > 0 or str(rl.off_policy) == "decoupled"):
        # recomputed "old" log-probs are the current policy's: the ratio would ignore which version sampled
        raise ValueError(f"rl.old_logprobs='recompute' with rl.max_staleness={k} / rl.off_policy="
                         f"{str(rl.off_policy)!r}: a stale batch's ratio must use the behaviour log-probs the "
                         "sampler recorded; set rl.old_logprobs='sampler'")
    ahead = int(config.agent.stream_ahead_batches)
    if ahead < 0 or (ahead > 0 and (k < 1 or str(rl.task) != "agent" or int(config.agent.waves) != 1)):
        raise ValueError(f"agent.stream_ahead_batches={ahead}: must be >= 0, and streaming episodes across steps "
                         f"needs rl.task='agent', rl.max_staleness >= 1 (a carried episode is a version older; got "
                         f"{k}) and agent.waves=1 (the stream runs every live episode in one wave)")
    if bool(rl.dynamic_sampling) and (int(rl.dynamic_sampling_max_draws) < 1 or ahead > 0):
        raise ValueError(f"rl.dynamic_sampling needs rl.dynamic_sampling_max_draws >= 1 (got "
                         f"{int(rl.dynamic_sampling_max_draws)}) and agent.stream_ahead_batches=0 (got {ahead}: a "
                         "streamed step takes the first groups to finish, not a batch to refill)")
    if k > 0 and str(rl.task) == "agent" and str(config.agent.kv_cache) == "kept":
        raise ValueError(f"agent.kv_cache='kept' with rl.max_staleness={k}: kept K/V drives the trainer's inline "
                         "engine directly, which the trainer updates while the producer collects; set "
                         "agent.kv_cache='reprefill' or rl.max_staleness=0")
    parse_cpus(str(rl.trainer_cpus), "rl.trainer_cpus")
    n = int(config.sampler.num_processes)
    if n < 1 or (n > 1 and str(config.sampler.mode) == "inline"):
        raise ValueError(f"sampler.num_processes={n}: must be >= 1, and 1 with sampler.mode='inline' (a fleet is "
                         "of sampler processes)")
    cpu_shares(parse_cpus(str(config.sampler.cpus), "sampler.cpus"), n)
    fleet_placement(str(config.sampler.cpus), str(config.sampler.devices), n)
    check_memory_split(float(rl.trainer_memory_fraction), float(config.sampler.memory_fraction), n,
                       str(config.sampler.devices), str(config.sampler.mode))
    if str(config.sampler.devices).strip() and str(config.sampler.mode) == "inline":
        raise ValueError(f"sampler.devices={str(config.sampler.devices)!r} with sampler.mode='inline': an inline "
                         "sampler runs on the trainer's devices; set sampler.mode='process' or sampler.devices=''")
    if bool(config.sampler.partial_rollouts):  # before the SFT stage, not when the sampler starts after it
        if int(config.sampler.partial_segment) < 1:
            raise ValueError(f"sampler.partial_segment={int(config.sampler.partial_segment)}: the decode steps "
                             "between two version checks of sampler.partial_rollouts, must be >= 1")
        if str(config.sampler.mode) == "inline":
            raise ValueError("sampler.partial_rollouts=True with sampler.mode='inline': partial rollouts take the "
                             "versions the trainer publishes while a request decodes, in the sampler process; set "
                             "sampler.mode='process' (inline, the trainer hands over its params between requests)")


def start_warnings(config: Experiment) -> list[str]:
    """One line for each setting that runs but will not do what it seems (an entry point logs them once at start):
    sampler processes of a fleet that no request reaches, and rl.off_policy='decoupled' at one update per batch
    (where its clip never acts)."""
    rl, s = config.rl, config.sampler
    if int(rl.num_steps) <= 0:
        return []
    out = []
    n = int(s.num_processes)
    if n > 1 and str(rl.task) == "repair":
        # The fleet deals a request out by whole engine batches (sampler/fleet.py), one request at a time, so a
        # request of fewer batches than processes leaves the rest idle. (The held-out evaluation's requests are
        # sampler.max_batch prompts x 1 sample: one batch.) Agent episodes send turns of other sizes: not counted.
        prompts = min(int(s.prompts_per_request) or int(rl.prompts_per_step), int(rl.prompts_per_step))
        per_batch = max(1, int(s.max_batch) // int(rl.num_samples))
        batches = -(-prompts // per_batch)
        if batches < n:
            out.append(
                f"sampler.num_processes={n}: each sampler request holds {batches} engine batch"
                f"{'es' if batches > 1 else ''} ({prompts} prompt(s) of sampler.prompts_per_request="
                f"{s.prompts_per_request} / rl.prompts_per_step={rl.prompts_per_step}, x rl.num_samples="
                f"{rl.num_samples}, in batches of sampler.max_batch={s.max_batch} rows = {per_batch} prompt(s)) and "
                f"the fleet splits a request only at batch boundaries, so {n - batches} of the {n} sampler processes "
                f"will never serve a request (standing by for a failed one); set sampler.num_processes={batches}, "
                "or send more prompts per request")
    if str(rl.off_policy) == "decoupled" and int(rl.ppo_minibatches) == 1 and int(rl.update_epochs) == 1:
        out.append("rl.off_policy='decoupled' with one update per batch (rl.ppo_minibatches=1, rl.update_epochs=1): "
                   "its clip never acts (the ratio to the proximal policy is 1), so it is REINFORCE with capped "
                   "behaviour weights; AReaL splits each batch into rl.ppo_minibatches=4 updates, as "
                   "experiments/ablations/async_grpo.py does (ABLATIONS.md, issue 47)")
    return out


def _check_agent(config: Any) -> None:
    """rl.task = "agent": the limits fit together (a turn needs room in the context and the sampler's cache)."""
    a = config.agent
    for key in ("max_turns", "max_context", "env_workers", "waves", "memory_mb", "processes", "disk_mb", "file_mb",
                "tmp_mb", "shm_mb"):
        if int(getattr(a, key)) < 1:
            raise ValueError(f"agent.{key} must be >= 1, got {getattr(a, key)}")
    for key in ("timeout_s", "step_timeout_s"):
        if float(getattr(a, key)) <= 0:
            raise ValueError(f"agent.{key} must be > 0, got {getattr(a, key)}")
    if int(config.data.max_prompt_len) < int(a.max_context):
        raise ValueError(f"data.max_prompt_len={config.data.max_prompt_len} < agent.max_context={a.max_context}: "
                         "the sampler takes each turn's whole conversation as its prompt")
    if int(config.sampler.max_new_tokens) >= int(a.max_context):
        raise ValueError(f"sampler.max_new_tokens={config.sampler.max_new_tokens} (one turn) must be below "
                         f"agent.max_context={a.max_context}")
    if str(a.kv_cache) == "kept" and str(config.sampler.mode) != "inline":
        raise ValueError("agent.kv_cache='kept' keeps each conversation's K/V in the trainer's own engine: it needs "
                         "sampler.mode='inline' (the sampler process re-prefills: agent.kv_cache='reprefill')")
    if bool(a.instances or a.eval_instances) != bool(a.repos):
        raise ValueError(f"agent.instances={a.instances!r} / agent.eval_instances={a.eval_instances!r} / "
                         f"agent.repos={a.repos!r}: SWE-bench instances need the folder of their clones, and "
                         "agent.repos is only read with agent.instances or agent.eval_instances")


def _one_of(key: str, value: Any, allowed: Any) -> None:
    if value not in allowed:
        raise ValueError(f"{key}={value!r} is not one of {sorted(allowed, key=str)}"
                         + did_you_mean(str(value), [str(a) for a in allowed]))


def _check_names(config: Any) -> None:
    """Registry names, before any process starts or anything compiles (fixed value sets are the sections'
    `choices`, checked by `read_sections`)."""
    if str(config.model.name) == FROM_CHECKPOINT:
        if not config.model.hf_dir:
            raise ValueError(f"model.name={FROM_CHECKPOINT!r} takes the model from model.hf_dir's config.json, but "
                             "model.hf_dir is empty")
    else:
        _one_of("model.name", str(config.model.name), MODEL_CONFIGS)
    _one_of("mesh.name", str(config.mesh.name), MESHES)
    _one_of("optim.schedule", str(config.optim.schedule), SCHEDULES)
    _one_of("model.attention_impl", config.model.attention_impl, IMPLEMENTATIONS)
    if int(config.rl.num_steps) > 0:
        get_reward_fn(str(config.reward.kind))  # ValueError names reward.kind (python: targets are imported)
    if int(config.eval.every_steps) > 0:
        try:
            get_reward_fn(str(config.eval.reward_kind))
        except ValueError as e:
            raise ValueError(str(e).replace("reward.kind=", "eval.reward_kind=")) from None
    if str(config.data.generator) == "testbed" and not str(config.data.train_files).strip():
        parse_families(str(config.data.testbed_families), "data.testbed_families")  # ValueError: did you mean
        parse_families(str(config.eval.families), "eval.families")
        if str(config.data.testbed_package):
            try:
                generate_tasks(0, 0, package=str(config.data.testbed_package))  # validates the name only
            except ValueError as e:
                raise ValueError(f"data.testbed_package: {e}") from None
    else:  # a testbed key set where no testbed task is generated would be ignored without a word
        for key, value in (("data.testbed_families", config.data.testbed_families),
                           ("data.testbed_package", config.data.testbed_package),
                           ("eval.families", config.eval.families)):
            if str(value).strip():
                why = ("data.train_files is set: the records come from it" if str(config.data.train_files).strip()
                       else f"data.generator={str(config.data.generator)!r}")
                raise ValueError(f"{key}={str(value)!r} applies to testbed tasks only, and {why}; set "
                                 "data.generator='testbed' (and data.train_files='') or clear it")


def _check_files(config: Any) -> None:
    """The directories and record files a run reads exist."""
    for key in ("model.hf_dir", "model.tokenizer"):
        section, field = key.split(".")
        path = str(getattr(getattr(config, section), field) or "")
        named = NAMED_TOKENIZERS if key == "model.tokenizer" else ("smollm2",)
        if path and path not in named and not os.path.isdir(os.path.expanduser(path)):
            raise ValueError(f"{key}={path!r}: no such directory (a Hugging Face model/tokenizer directory, or "
                             f"one of {', '.join(map(repr, named))})")
    if str(config.data.train_files).strip():
        expand_record_paths(str(config.data.train_files), key="data.train_files")  # FileNotFoundError names it
    if int(config.eval.every_steps) > 0 and str(config.eval.records).strip():
        expand_record_paths(str(config.eval.records), key="eval.records")
    if str(config.rl.task) == "agent":
        for key in ("agent.instances", "agent.repos", "agent.eval_instances"):
            path = os.path.expanduser(str(getattr(config.agent, key.split(".")[1])))
            if path and not os.path.exists(path):
                raise FileNotFoundError(f"{key}={path!r}: no such file or directory")


def _check_batch_shards(config: Any) -> None:
    """A micro-batch is sharded over the batch mesh axes: on a named mesh its size must split over them."""
    if config.mesh.name not in MESHES:
        return  # an unnamed mesh: its device count is only known at run time (sharding.validate_mesh then)
    sizes = sharding.mesh_axis_sizes(config, MESHES[config.mesh.name].num_devices)
    axes = dict(sharding.logical_axis_rules(config)).get("activation_batch") or ()
    shards = math.prod(sizes[a] for a in ((axes,) if isinstance(axes, str) else axes))
    rl, sft = config.rl, config.sft
    batches = []  # only the stages that run shard a batch
    if int(sft.num_steps) > 0:
        batches.append(("sft.micro_batch_size", int(sft.micro_batch_size) or int(sft.batch_size)))
    if int(rl.num_steps) > 0:
        batches.append(("rl.micro_batch_size",
                        int(rl.micro_batch_size) or int(rl.prompts_per_step) * int(rl.num_samples)))
    for key, size in batches:
        if size % shards:
            raise ValueError(f"{key}: a micro-batch of {size} sequences does not split over the {shards} batch shards "
                             f"of mesh {config.mesh.name!r}; use a multiple of {shards} (0: the whole batch)")


def load_run_config(workdir: str | os.PathLike) -> Experiment:
    """A run directory's resolved config (`WORKDIR/config.json`), typed. Keys added to experiments/base.py since
    the run started are filled with base's values (they did not exist for it); everything it wrote is kept."""
    import pathlib

    path = pathlib.Path(workdir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a run directory (no config.json)")
    merged = json.loads(load_experiment_config(
        str(pathlib.Path(__file__).resolve().parents[1] / "experiments" / "base.py")).to_json())
    try:
        stored = json.loads(path.read_text())
    except ValueError as e:  # cut short (a copy that stopped): name the file, not only the JSON position
        raise ValueError(f"{path} does not parse as JSON ({e}): a truncated copy of the run's config?") from None
    if not isinstance(stored, dict) or "model_type" in stored:
        # a Hugging Face model folder's config.json: its keys are not an experiment's (was "unknown config key")
        raise ValueError(f"{path} is a Hugging Face model's config.json, not a run's: give the run's workdir (the "
                         "folder train wrote, with checkpoints/ and policy/)")
    for section, value in stored.items():
        if isinstance(value, dict) and isinstance(merged.get(section), dict):
            merged[section].update(value)
        else:
            merged[section] = value
    return resolve_config(merged, check_files=False)
