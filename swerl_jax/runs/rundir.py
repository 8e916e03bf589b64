"""A run directory's identity: its default name, the config it was started with, and what a resume may change.

    workdir = default_workdir("experiments/tiny_cpu.py:short")   # workdirs/tiny_cpu-short
    record_config(workdir, config, allow_change=False)          # raises ConfigChangeError on a silent change

A re-run of the same command resumes a run (train.py). A re-run with a different config must not silently
continue the old run: every field that changes results has to match the run's `config.json`; the fields in
`OPERATIONAL_KEYS` (where logs go, how many worker or sampler processes, ports, checkpoint cadence) may change freely.
`--allow_config_change` accepts the difference; it is appended to `config_changes.jsonl` with the checkpoint
step of each stage at which it took effect. Every start keeps its resolved config as `configs/NNNN.json`
(`config.json` is the newest).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import time
from typing import Any

log = logging.getLogger(__name__)

# Fields that do not change what a run computes, so a resume may change them without a flag.
OPERATIONAL_KEYS = (
    "logging.", "eval.", "checkpoint.every_steps", "checkpoint.max_to_keep", "checkpoint.async_save",
    "sampler.host", "sampler.port", "sampler.request_timeout_s", "sampler.weights_dir",
    "sampler.memory_fraction", "rl.trainer_memory_fraction",  # how much memory, not what is computed
    "data.worker_count", "reward.num_workers", "agent.env_workers", "agent.eval_tasks",
    "agent.eval_instances",
    # A fleet samples what one process does, bit for bit, at any size (sampler/fleet.py: parts cut at the engine's
    # batch boundaries keep their offsets and seeds; each member's engine runs on one device, as one process's does)
    "sampler.num_processes",
    # Where the roles run (launch/async_node.sh always passes these): cores only pin a process
    # (affinity.pin), and a sampler engine runs on its first visible device whatever its share of
    # sampler.devices holds (sampler/factory.py: jax.devices()[0]), batched by sampler.max_batch, so a member's GPU
    # count never changes how prompts are batched. (Another GPU *model* can change last bits; that is hardware.)
    "sampler.cpus", "sampler.devices", "rl.trainer_cpus",
    "mesh.coordinator_address", "mesh.num_processes", "mesh.process_id",
)
STAGE_CHECKPOINTS = {"sft": ("sft", "checkpoints"), "grpo": ("checkpoints",)}


class ConfigChangeError(ValueError):
    """A resume whose config differs from the run's in fields that change results."""


def default_workdir(config_arg: str) -> str:
    """workdirs/<experiment>[-<variant>] for `--config=experiments/NAME.py[:variant]`, so variants of one
    experiment do not share (and silently resume) one run."""
    path, _, variant = str(config_arg).partition(":")
    name = pathlib.Path(path).stem
    if variant:
        name += "-" + "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in variant)
    return os.path.join("workdirs", name)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"rl": {"kl_coef": 0.04}} -> {"rl.kl_coef": 0.04} (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(old: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) for every result-changing field that differs (missing: None).

    A key the old config lacks is no change when the new value is experiments/base.py's default: the key was added
    to the codebase after the run started, and a new key's default keeps what the code did before (the rule for
    adding one), so a run in flight resumes across it."""
    from experiments import base  # the defaults every experiment starts from

    a, b = flatten(old), flatten(new)
    # as config.json holds them (JSON: a tuple default such as rl.imports=() reads back as [])
    defaults = flatten(json.loads(base.get_config().to_json())) if set(b) - set(a) else {}
    out = []
    for key in sorted(set(a) | set(b)):
        if key.startswith(OPERATIONAL_KEYS) or key in OPERATIONAL_KEYS:
            continue
        if key not in a and key in defaults and defaults[key] == b[key]:
            continue
        if a.get(key) != b.get(key) and not same_path_made_absolute(a.get(key), b.get(key)):
            out.append((key, a.get(key), b.get(key)))
    return out


def same_path_made_absolute(old: Any, new: Any) -> bool:
    """Whether `new` is the relative path `old` made absolute (entry points resolve typed paths once since issue 46:
    a run started before that recorded `model.hf_dir='ckpt/x'`, its resume records '/home/u/ckpt/x'), so that the
    same folder typed the same way resumes the run instead of counting as a config change."""
    if not (isinstance(old, str) and isinstance(new, str) and old and not os.path.isabs(old) and os.path.isabs(new)):
        return False
    tail = pathlib.PurePath(os.path.normpath(old)).parts
    return ".." not in tail and pathlib.PurePath(new).parts[-len(tail):] == tail


def latest_steps(workdir: str | os.PathLike) -> dict[str, int]:
    """{"sft": step, "grpo": step} of the newest finished checkpoint of each stage present in `workdir`."""
    out = {}
    for stage, parts in STAGE_CHECKPOINTS.items():
        folder = pathlib.Path(workdir).joinpath(*parts)
        steps = [int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()] if folder.is_dir() else []
        if steps:
            out[stage] = max(steps)
    return out


def is_finished(steps: dict[str, int], sft_steps: int, rl_steps: int) -> bool:
    """Whether a run whose newest checkpoints are `steps` (`latest_steps`) has nothing left to train."""
    return bool(steps) and steps.get("grpo", 0) >= rl_steps and (rl_steps > 0 or steps.get("sft", 0) >= sft_steps)


def record_config(workdir: str | os.PathLike, config_json: str, allow_change: bool = False) -> dict[str, int]:
    """Check `config_json` (the resolved config) against the run in `workdir`, then keep it.

    Without checkpoints the directory holds no run yet and the config is simply written. With checkpoints,
    result-changing differences raise `ConfigChangeError` (listing each key, old -> new) unless `allow_change`,
    which records them in config_changes.jsonl. Returns `latest_steps(workdir)`."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    steps = latest_steps(workdir)
    new = json.loads(config_json)
    previous = workdir / "config.json"
    shared_sft = set(steps) == {"sft"} and (workdir / "sft" / "shared_from.json").is_file()
    if steps and not previous.exists() and not shared_sft:
        # Checkpoints of unknown config: resuming would train on from them as if they were this config's. Only the
        # sweep's copy of a finished identical SFT stage (checked when copied, noted in sft/shared_from.json) is known.
        raise ConfigChangeError(
            f"{workdir} holds checkpoints ({steps}) but no config.json, so nothing says which config made them; "
            "choose another --workdir, or put back the config.json of the run that wrote them")
    if steps and previous.exists():
        changes = config_changes(json.loads(previous.read_text()), new)
        sft_done = steps.get("sft", 0) >= int(new.get("sft", {}).get("num_steps", 0)) > 0

        def effect(key: str) -> str:  # an SFT key after the SFT stage finished: that stage is never re-run
            if sft_done and key.startswith("sft."):
                return f" (changes nothing: the SFT stage finished at step {steps['sft']} and is not re-run)"
            return ""

        if changes and allow_change:
            for k, old, cur in changes:
                if effect(k):
                    log.warning("%s: %r -> %r%s", k, old, cur, effect(k))
        if changes and not allow_change:
            lines = "\n".join(f"  {k}: {old!r} -> {cur!r}{effect(k)}" for k, old, cur in changes)
            raise ConfigChangeError(
                f"{workdir} holds a run (checkpoints at {steps}) started with a different config:\n{lines}\n"
                "Re-run with the run's config to resume it, choose another --workdir for a new run, or pass "
                "--allow_config_change to continue this run with the new values (recorded in "
                "config_changes.jsonl).")
        if changes:
            entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "from_checkpoint": steps,
                     "changes": {k: {"old": old, "new": cur} for k, old, cur in changes}}
            with open(workdir / "config_changes.jsonl", "a") as f:
                f.write(json.dumps(entry) + "\n")
    history = workdir / "configs"
    history.mkdir(exist_ok=True)
    n = len([p for p in history.glob("*.json") if p.stem.isdigit()])
    (history / f"{n:04d}.json").write_text(config_json)
    tmp = previous.with_name("config.json.tmp")
    tmp.write_text(config_json)
    os.replace(tmp, previous)
    return steps


def refuse_other_config(previous: pathlib.Path, new: dict, ignore: tuple[str, ...] = (),
                        what: str = "another config") -> None:
    """ValueError listing every changed key when `previous` (an output folder's recorded config JSON) differs from
    `new` outside the `ignore` prefixes: an evaluation's results are reused on resume (or overwritten), so another
    config must not run into them. `what` names the other side in the message."""
    if not previous.exists():
        return
    old, cur = flatten(json.loads(previous.read_text())), flatten(new)
    changes = [(k, old.get(k), cur.get(k)) for k in sorted(set(old) | set(cur))
               if not (ignore and k.startswith(ignore)) and old.get(k) != cur.get(k)]
    if changes:
        lines = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changes)
        raise ValueError(f"{previous.parent} holds results of {what} ({lines}): choose another --out, or "
                         f"remove {previous.parent} to start over")
