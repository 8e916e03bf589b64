"""A sweep directory's runs on disk: their names, finding a planned run that is already there, index.json, and
SFT stages shared between runs (`--share-sft`).

    name = run_name(overrides, seed, config)                  # reward.kind-discrete__seed-1
    existing = scan_runs(root / "runs")                       # what earlier sweeps left, with their config.json
    run_dir, how, detail = locate_run(root / "runs", name, config, existing, claimed)
    write_index(root, merged_index(root, index, base_config))  # atomic; never drops a run the directory holds
    share_sft_stage(run_dir, config, [root / "runs"])         # --share-sft: copy a finished identical SFT stage

A run is named by its result-changing overrides only (`rundir.OPERATIONAL_KEYS`, the keys a resume may change
freely, are left out), sorted by key, each value as the resolved config holds it: the same result-changing
settings always give the same name, whatever the flag order or the cosmetic flags. A run that an earlier sweep
named otherwise (older code put every fixed override, then `--set`, in the name, in flag order) is found by its
`config.json`:
no result-changing difference from the planned run means it is that run, finished or resumable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import sys
from typing import Any

from swerl_jax.runs import rundir
from swerl_jax.runs.metrics import read_metrics


def is_operational(key: str) -> bool:
    """Whether `key` changes nothing a run computes (`rundir.OPERATIONAL_KEYS`, as `rundir.config_changes` reads
    them): where logs go, progress bars, eval cadence, checkpoint cadence, ports, worker counts."""
    return key.startswith(rundir.OPERATIONAL_KEYS) or key in rundir.OPERATIONAL_KEYS


def _format_value(value: Any) -> str:
    if isinstance(value, bool | int | float | str) or value is None:
        return str(value)  # str(0.04) is the shortest round-tripping form; True/False as earlier sweeps wrote them
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def run_name(overrides: dict[str, Any], seed: int, config: dict | None = None, seed_key: str = "seed") -> str:
    """A run's directory name, `reward.kind-discrete__seed-1`: its result-changing overrides sorted by key, then the
    seed (`rl.seed-1` where the seed is the GRPO stage's). With the run's resolved `config`, each value is written as
    the config holds it (`rl.kl_coef=0` and `=0.0` are one run)."""
    flat = rundir.flatten(config) if config is not None else {}
    parts = [f"{k}-{_format_value(flat.get(k, v))}" for k, v in sorted(overrides.items()) if not is_operational(k)]
    return "__".join([*parts, f"{seed_key}-{seed}"]).replace("/", "_").replace(" ", "_")


def result_identity(config: dict) -> str:
    """A canonical text of `config`'s result-changing fields: two planned runs with the same identity would train
    the same thing twice."""
    return json.dumps({k: v for k, v in rundir.flatten(config).items() if not is_operational(k)}, sort_keys=True)


_WARNED: set[str] = set()


@dataclasses.dataclass
class ExistingRun:
    """A directory under the sweep's runs/: its `config.json` (None when absent or unreadable) and newest
    checkpoint of each stage (`rundir.latest_steps`)."""

    path: pathlib.Path
    config: dict | None
    steps: dict[str, int]

    @property
    def finished(self) -> bool:
        """Whether its checkpoints reach the stages' steps of its own config."""
        try:
            sft, rl = int(self.config["sft"]["num_steps"]), int(self.config["rl"]["num_steps"])
        except (TypeError, KeyError, ValueError):  # no config, or not a run's
            return False
        return rundir.is_finished(self.steps, sft, rl)


def scan_runs(runs_dir: pathlib.Path) -> dict[str, ExistingRun]:
    """{directory name: ExistingRun} of every run directory under `runs_dir` ({} when there is none)."""
    out = {}
    for path in sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []:
        if not path.is_dir() or path.name.startswith("."):
            continue
        config = None
        if (path / "config.json").is_file():
            try:
                config = json.loads((path / "config.json").read_text())
            except (OSError, ValueError) as e:  # a hand-broken config.json: the run is listed, never matched
                if str(path) not in _WARNED:  # once, not at every index write
                    _WARNED.add(str(path))
                    print(f"sweep: {path / 'config.json'}: unreadable ({e}); that run is not matched to planned "
                          "ones", file=sys.stderr, flush=True)
            if not isinstance(config, dict) or not isinstance(config.get("sft"), dict):
                config = None
        out[path.name] = ExistingRun(path, config, rundir.latest_steps(path))
    return out


def locate_run(runs_dir: pathlib.Path, name: str, config: dict, existing: dict[str, ExistingRun],
               claimed: set[str]) -> tuple[pathlib.Path, str, str]:
    """(the planned run's directory, how it was found, a detail for the report).

    `same`: `runs_dir/name`, new or holding this run (or nothing trained yet). `found`: a directory of another name
    (`claimed` ones excepted: other planned runs' names) holding a run with no result-changing difference from
    `config`, the most advanced one: an earlier sweep named it otherwise. `conflict`: `runs_dir/name` holds
    checkpoints of a run whose config differs in result-changing keys (the detail lists them); the trainer would
    refuse to resume it, and it must not count as this run's result."""
    same = existing.get(name)
    if same is not None and (same.config is None or not same.steps or not rundir.config_changes(same.config, config)):
        return same.path, "same", ""
    matches = [e for n, e in existing.items()
               if n != name and n not in claimed and e.steps and e.config is not None
               and e.config.get("seed") == config.get("seed") and not rundir.config_changes(e.config, config)]
    if matches:
        best = max(matches, key=lambda e: (e.finished, sum(e.steps.values()), e.path.name))
        others = f" (also: {', '.join(e.path.name for e in matches if e is not best)})" if len(matches) > 1 else ""
        return best.path, "found", others
    if same is None:
        return runs_dir / name, "same", ""
    changes = rundir.config_changes(same.config, config)
    shown = ", ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in changes[:4])
    more = f" and {len(changes) - 4} more" if len(changes) > 4 else ""
    return same.path, "conflict", f"{shown}{more}"


def read_index(root: pathlib.Path) -> dict | None:
    """`root/index.json`, or None when there is none or it is unreadable (its runs are still found on disk)."""
    path = root / "index.json"
    if not path.is_file():
        return None
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        print(f"sweep: {path}: unreadable ({e}); rebuilt from the run directories", file=sys.stderr, flush=True)
        return None
    return index if isinstance(index, dict) and isinstance(index.get("runs"), list) else None


def last_metrics(run_dir: pathlib.Path) -> dict:
    """The numbers of the last row of `run_dir/metrics.jsonl` ({} when it logged none)."""
    path = run_dir / "metrics.jsonl"
    rows = read_metrics(path) if path.exists() else []
    return {k: v for k, v in rows[-1].items() if isinstance(v, int | float)} if rows else {}


def _unplanned_entry(run: ExistingRun, previous: dict | None, base_config: dict, keys: set[str]) -> dict:
    """An index entry for a run directory this invocation did not plan (another seed, variant or command)."""
    cfg = run.config or {}
    if previous is not None:
        entry = dict(previous)
    else:  # its overrides, as a planned run's would read: the planned runs' keys, and what else differs from
        # the experiment's config (seed apart), so analysis.ablations groups it with its variant
        have = rundir.flatten(cfg)
        overrides = {k: have[k] for k in sorted(keys) if k in have}
        overrides.update((k, new) for k, _, new in rundir.config_changes(base_config, cfg) if k != "seed" and k in have)
        entry = {"name": run.path.name, "seed": cfg.get("seed"), "overrides": overrides}
    entry.update(name=run.path.name, workdir=str(run.path), log=str(run.path / "train.log"))
    if run.finished:
        entry["status"] = "done"
    elif entry.get("status") not in ("failed", "running", "conflict"):
        entry["status"] = "pending"
    entry["final"] = last_metrics(run.path)
    return entry


def merged_index(root: pathlib.Path, index: dict, base_config: dict) -> dict:
    """`index` (this invocation's runs) with every other run directory of the sweep appended, by name: as the index
    on disk lists it, or (unlisted) from its config.json; a listed run whose directory is gone is dropped. The disk
    is re-read at every write, so sweeps of other seeds writing beside this one keep their runs listed too."""
    listed = {e["name"] for e in index["runs"]}
    keys = {k for e in index["runs"] for k in e.get("overrides", {})}
    previous = {e.get("name"): e for e in (read_index(root) or {}).get("runs", []) if isinstance(e, dict)}
    extra = []
    for name, run in scan_runs(root / "runs").items():
        if name in listed or (name not in previous and run.config is None):
            continue
        extra.append(_unplanned_entry(run, previous.get(name), base_config, keys))
    return {**index, "runs": index["runs"] + extra}


def write_index(root: pathlib.Path, index: dict) -> None:
    """Write `root/index.json` atomically: a temporary file, then os.replace (a reader never sees half an index,
    and a crash mid-write leaves the previous one)."""
    tmp = root / f"index.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(index, indent=1))
    os.replace(tmp, root / "index.json")


# Keys outside rl.* that the SFT stage (its training and its greedy held-out evaluation) never reads: it trains at
# sft.learning_rate, and greedy decoding ignores the sampling temperature, top-p and top-k.
NOT_READ_BY_SFT = frozenset({"optim.learning_rate", "sampler.temperature", "sampler.top_p", "sampler.top_k"})


def sft_stage_differences(a: dict, b: dict) -> list[str]:
    """The keys of two resolved configs that could make their SFT stages differ: every result-changing key
    (`rundir.config_changes`) except `rl.*` and `reward.*`, which only the GRPO stage reads (`rl.task` picks the SFT
    trainer; the SFT stage's held-out evaluation scores with `eval.reward_kind`), and `NOT_READ_BY_SFT`."""
    return [k for k, _, _ in rundir.config_changes(a, b)
            if (not k.startswith(("rl.", "reward.")) or k == "rl.task") and k not in NOT_READ_BY_SFT]


def changed_mid_sft(run_dir: pathlib.Path, sft_steps: int, schedule: str = "constant") -> str:
    """The SFT-relevant config changes that `run_dir`'s config_changes.jsonl records before its SFT stage reached
    `sft_steps` (its final length), as `key at SFT step N` text; empty when none. Such a stage (say, resumed with
    a new learning rate) is not what its config.json alone trains. One change is exempt: `sft.num_steps` under a
    constant `optim.schedule` (the stage's `schedule`), which reads no step count, so a stage extended from 600
    to 2,000 steps is a 2,000-step stage (the optimizer and data iterator resume exactly)."""
    path = run_dir / "config_changes.jsonl"
    if not path.is_file():
        return ""
    found = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
            at, keys = int(entry["from_checkpoint"].get("sft", 0)), list(entry["changes"])
        except (ValueError, TypeError, KeyError, AttributeError):
            return f"{path.name}: an unreadable line"
        if at < sft_steps:
            found += [f"{k} at SFT step {at}" for k in keys if not is_operational(k)
                      and (not k.startswith("rl.") or k == "rl.task")
                      and not (k == "sft.num_steps" and schedule == "constant")]
    return ", ".join(found)


def share_sft_stage(run_dir: pathlib.Path, config: dict, run_roots: list[pathlib.Path]) -> pathlib.Path | None:
    """Copy a finished, identical SFT stage into `run_dir/sft` (which must not exist yet); returns its run dir.

    A candidate is any directory under `run_roots` whose `config.json` has no SFT-relevant difference from
    `config` and whose SFT checkpoints reach `sft.num_steps`; the copy goes to a temporary name first, so an
    interrupted copy never looks like a finished stage."""
    target = run_dir / "sft"
    if target.exists():
        return None
    steps = int(config["sft"]["num_steps"])
    for root in run_roots:
        for candidate in sorted(root.glob("*")) if root.is_dir() else []:
            cfg, src = candidate / "config.json", candidate / "sft"
            if candidate.resolve() == run_dir.resolve() or not cfg.is_file() or not src.is_dir():
                continue
            if rundir.latest_steps(candidate).get("sft", 0) < steps:
                continue
            try:
                other = json.loads(cfg.read_text())
            except (OSError, ValueError) as e:  # a run dir with a broken config.json is not a source, nor fatal
                print(f"sweep: --share-sft skips {cfg}: unreadable config ({e})", file=sys.stderr, flush=True)
                continue
            if not isinstance(other, dict) or sft_stage_differences(other, config):
                continue
            changed = changed_mid_sft(candidate, steps, str(other.get("optim", {}).get("schedule", "")))
            if changed:  # its config.json is the last config, not the one that trained its first steps
                print(f"sweep: --share-sft skips {candidate}: its SFT stage changed config mid-way ({changed})",
                      file=sys.stderr, flush=True)
                continue
            tmp = run_dir / f"sft.copying{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            (tmp / "shared_from.json").write_text(json.dumps({"run": str(candidate.resolve()), "sft_steps": steps}))
            os.replace(tmp, target)
            return candidate
    return None
