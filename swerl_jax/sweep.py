"""Seeded sweeps: variants x seeds of one experiment, run one after another (resumable) or emitted as launch commands.

    python -m swerl_jax.sweep --config=experiments/tiny_cpu.py --sweep reward.kind=continuous,discrete \\
        --seeds 0,1,2 --workdir sweeps/reward [--set rl.num_steps=8] [--emit launch/local.sh] [--dry-run]

Variants are the product of every `--sweep KEY=V1,V2` axis, or what the experiment file declares in
`get_sweep(arg) -> list[dict]` (big_vision style; `--sweep` then adds axes to each). Each (variant, seed) is one
run: exactly `python -m swerl_jax.train --config=FILE --workdir=DIR/runs/NAME --config.KEY=VALUE ...
--config.seed=SEED` in a subprocess, its output in `DIR/runs/NAME/train.log`. Every override is checked against the
config (types, values, keys; `swerl_jax.config.resolve_config`) before the first run starts. A finished run
(`rundir.is_finished`) is skipped, an interrupted one resumes, a failed one is recorded and the sweep goes on.
`DIR/index.json` lists every run: name, overrides, seed, status (done | failed | pending), workdir, log, the last
logged metrics. `--emit SCRIPT` writes `DIR/commands.sh`, one launcher line per run, instead of running.

`--share-sft` (with `--sft-from OTHER_SWEEP_DIR ...`): ablations of the RL stage (RL vs SFT, GRPO++ switches) all
start from the same seeded SFT stage. A run whose resolved config equals a finished run's in everything but `rl.*`
(`rl.task` excepted: it picks the SFT trainer) and the operational keys starts from a copy of that run's `sft/`
directory (checkpoints with their integrity manifests, metrics, held-out eval), noted in `sft/shared_from.json`;
`python -m swerl_jax.train` then resumes a finished SFT stage instead of training it again. The SFT stage is
deterministic for a seed (`make demo`'s metrics repeat bit for bit), so this changes no result, only the time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time
from typing import Any

from swerl_jax import rundir
from swerl_jax.config import load_experiment_config, resolve_config
from swerl_jax.metrics import read_metrics

REPO = pathlib.Path(__file__).resolve().parents[1]


def parse_value(config: Any, key: str, text: str) -> Any:
    """`text` as the type of `config`'s field `key` (int, float, bool, str, None for an unset optional string)."""
    node = config
    *path, last = key.split(".")
    for part in path:
        if part not in node:
            raise KeyError(f"unknown config key {key}")
        node = node[part]
    if last not in node:
        raise KeyError(f"unknown config key {key}")
    current = node[last]
    if isinstance(current, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{key}={text!r}: expected a bool (true/false)")
        return text.lower() in ("true", "1")
    if isinstance(current, int):
        return int(text)
    if isinstance(current, float):
        return float(text)
    return None if text == "None" else text


def parse_axes(config: Any, specs: list[str]) -> list[tuple[str, list[Any]]]:
    """`["reward.kind=continuous,discrete", ...]` -> [(key, typed values), ...]; errors name the key."""
    axes = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not values:
            raise ValueError(f"--sweep {spec!r}: expected KEY=V1,V2,...")
        axes.append((key, [parse_value(config, key, v) for v in values.split(",")]))
    return axes


def run_name(overrides: dict[str, Any], seed: int) -> str:
    """A directory name: `reward.kind-discrete__seed-1` (the overrides in order, then the seed)."""
    parts = [f"{k}-{v}" for k, v in overrides.items()] + [f"seed-{seed}"]
    return "__".join(parts).replace("/", "_").replace(" ", "_")


def plan_runs(config_arg: str, axes: list[tuple[str, list[Any]]], seeds: list[int], fixed: dict[str, Any],
              check_files: bool = True, variants: list[int] | None = None) -> list[dict]:
    """Every (variant, seed) run with its overrides, each checked by `resolve_config` before anything runs
    (`check_files`: also that its data and model files exist here; off when only emitting commands). `variants`
    keeps only those positions of the experiment's declared `get_sweep` list."""
    load_experiment_config(config_arg)  # the file exists; the repository root is importable
    path, _, arg = config_arg.partition(":")
    declared = [{}]
    module_sweep = _module_attr(path, "get_sweep")
    if module_sweep is not None:
        declared = list(module_sweep(arg or None))
    if variants is not None:
        bad = [i for i in variants if not 0 <= i < len(declared)]
        if bad:
            raise ValueError(f"--variants {bad}: {config_arg} declares {len(declared)} variants "
                             f"(0-{len(declared) - 1})")
        declared = [declared[i] for i in variants]
    runs = []
    for base_overrides in declared:
        for combo in itertools.product(*[[(k, v) for v in values] for k, values in axes]):
            overrides = {**fixed, **base_overrides, **dict(combo)}
            for seed in seeds:
                config = load_experiment_config(config_arg)
                for key, value in {**overrides, "seed": seed}.items():
                    set_key(config, key, value)
                resolved = resolve_config(config, check_files=check_files)  # a bad override fails here, naming the key
                runs.append({"name": run_name(overrides, seed), "overrides": overrides, "seed": seed,
                             "sft_steps": int(config.sft.num_steps), "rl_steps": int(config.rl.num_steps),
                             "config": json.loads(resolved.to_json())})
    names = [r["name"] for r in runs]
    if len(set(names)) != len(names):
        raise ValueError("two runs of the sweep have the same overrides and seed")
    return runs


def train_command(config_arg: str, workdir: pathlib.Path, overrides: dict[str, Any], seed: int,
                  launcher: str = "") -> list[str]:
    """The command of one run: `python -m swerl_jax.train ...`, or `LAUNCHER CONFIG ...` for a launch script."""
    flags = [f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in {**overrides, "seed": seed}.items()]
    path = config_arg
    if launcher:
        return [launcher, path, *flags]
    return [sys.executable, "-m", "swerl_jax.train", f"--config={path}", *flags]


def run_sweep(config_arg: str, workdir: str | os.PathLike, axes: list[tuple[str, list[Any]]], seeds: list[int],
              fixed: dict[str, Any] | None = None, emit: str = "", dry_run: bool = False,
              runner=subprocess.run, variants: list[int] | None = None, share_sft: bool = False,
              sft_from: list[str | os.PathLike] = ()) -> dict:
    """Run (or emit) every run of the sweep; returns the index (also written to `workdir/index.json`).
    `share_sft`: start a run from a finished run's identical SFT stage (this sweep's or `sft_from` sweeps')."""
    root = pathlib.Path(workdir).resolve()
    if sft_from and not share_sft:
        raise ValueError("--sft-from names sweeps whose SFT stages --share-sft reuses: pass --share-sft too")
    for other in sft_from:
        if not (pathlib.Path(other) / "runs").is_dir():
            raise FileNotFoundError(f"--sft-from {other}: no runs/ folder there (not a sweep's --workdir)")
    runs = plan_runs(config_arg, axes, seeds, fixed or {}, check_files=not (emit or dry_run), variants=variants)
    root.mkdir(parents=True, exist_ok=True)
    index = {"config": config_arg, "axes": [[k, v] for k, v in axes], "seeds": seeds, "runs": []}
    if emit:
        lines = [shlex.join(train_command(config_arg, root / "runs" / r["name"], r["overrides"], r["seed"], emit))
                 for r in runs]
        (root / "commands.sh").write_text("#!/usr/bin/env bash\n# one line per run of the sweep\n"
                                          + "\n".join(lines) + "\n")
    for r in runs:
        run_dir = root / "runs" / r["name"]
        entry = {**{k: r[k] for k in ("name", "overrides", "seed")}, "workdir": str(run_dir),
                 "log": str(run_dir / "train.log"), "status": "pending"}
        index["runs"].append(entry)
        if rundir.is_finished(rundir.latest_steps(run_dir), r["sft_steps"], r["rl_steps"]):
            entry["status"] = "done"
        elif not (emit or dry_run):
            run_dir.mkdir(parents=True, exist_ok=True)
            if share_sft and r["sft_steps"] > 0:
                source = share_sft_stage(run_dir, r["config"], [root / "runs"] + [pathlib.Path(d) / "runs"
                                                                                  for d in sft_from])
                if source is not None:
                    entry["sft_shared_from"] = str(source)
            t0 = time.time()
            with open(run_dir / "train.log", "a") as log:
                proc = runner(train_command(config_arg, run_dir, r["overrides"], r["seed"]), cwd=REPO,
                              stdout=log, stderr=subprocess.STDOUT, check=False)
            entry["status"] = "done" if proc.returncode == 0 else "failed"
            entry["returncode"], entry["seconds"] = proc.returncode, round(time.time() - t0, 1)
        entry["final"] = _last_metrics(run_dir)
        if (run_dir / "sft" / "eval.json").is_file():  # the SFT stage's held-out metric (train.evaluate_sft)
            entry["sft_eval"] = json.loads((run_dir / "sft" / "eval.json").read_text())
        _write_index(root, index)
    _write_index(root, index)
    return index


def sft_stage_differences(a: dict, b: dict) -> list[str]:
    """The keys of two resolved configs that could make their SFT stages differ: every result-changing key
    (`rundir.config_changes`) except `rl.*`, which only the GRPO stage reads (`rl.task` picks the SFT trainer)."""
    return [k for k, _, _ in rundir.config_changes(a, b) if not k.startswith("rl.") or k == "rl.task"]


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
            tmp = run_dir / f"sft.copying{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            (tmp / "shared_from.json").write_text(json.dumps({"run": str(candidate.resolve()), "sft_steps": steps}))
            os.replace(tmp, target)
            return candidate
    return None


def _last_metrics(run_dir: pathlib.Path) -> dict:
    path = run_dir / "metrics.jsonl"
    rows = read_metrics(path) if path.exists() else []
    return {k: v for k, v in rows[-1].items() if isinstance(v, int | float)} if rows else {}


def _write_index(root: pathlib.Path, index: dict) -> None:
    tmp = root / f"index.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(index, indent=1))
    os.replace(tmp, root / "index.json")  # a reader never sees half an index


def set_key(config: Any, key: str, value: Any) -> None:
    """Set the dotted `key` of a ConfigDict (the key must exist: see `parse_value`)."""
    *path, last = key.split(".")
    node = config
    for part in path:
        node = node[part]
    node[last] = value


def _module_attr(path: str, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_swerl_sweep_experiment", path)
    if spec is None or not os.path.exists(path):
        raise FileNotFoundError(f"--config={path}: no such config file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name, None)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit status 1 when a run failed."""
    p = argparse.ArgumentParser(prog="python -m swerl_jax.sweep", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="experiments/NAME.py[:arg]")
    p.add_argument("--workdir", required=True, help="the sweep's directory (runs/, index.json)")
    p.add_argument("--sweep", action="append", default=[], help="KEY=V1,V2,...: one axis (repeatable)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (config.seed of each run)")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE applied to every run (repeatable)")
    p.add_argument("--emit", default="", help="write DIR/commands.sh with this launcher (e.g. launch/local.sh)")
    p.add_argument("--dry-run", action="store_true", help="check and index the runs, run nothing")
    p.add_argument("--variants", default="", help="comma-separated positions in the config's declared sweep to run "
                   "(default: all of them)")
    p.add_argument("--share-sft", action="store_true", help="start each run from a finished run's identical SFT "
                   "stage (same config but rl.*) instead of training it again")
    p.add_argument("--sft-from", action="append", default=[], help="another sweep directory whose runs' SFT stages "
                   "--share-sft may reuse (repeatable)")
    args = p.parse_args(argv)
    try:
        base = load_experiment_config(args.config)
        axes = parse_axes(base, args.sweep)
        fixed = {}
        for spec in args.set:
            key, _, text = spec.partition("=")
            fixed[key] = parse_value(base, key, text)
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        variants = [int(v) for v in args.variants.split(",") if v.strip()] or None
        index = run_sweep(args.config, args.workdir, axes, seeds, fixed, emit=args.emit, dry_run=args.dry_run,
                          variants=variants, share_sft=args.share_sft, sft_from=args.sft_from)
    except (KeyError, ValueError, TypeError, FileNotFoundError) as e:
        raise SystemExit(f"swerl_jax.sweep: {str(e).strip(chr(39))}") from None
    statuses = [r["status"] for r in index["runs"]]
    print(f"sweep {args.workdir}: {len(statuses)} runs, {statuses.count('done')} done, "
          f"{statuses.count('failed')} failed, {statuses.count('pending')} pending", flush=True)
    return int("failed" in statuses)


if __name__ == "__main__":
    sys.exit(main())
