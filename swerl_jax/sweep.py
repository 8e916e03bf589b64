"""Seeded sweeps: variants x seeds of one experiment, run one after another (resumable) or emitted as launch commands.

    python -m swerl_jax.sweep --config=experiments/tiny_cpu.py --sweep reward.kind=continuous,discrete \\
        --seeds 0,1,2 --workdir sweeps/reward [--config.rl.num_steps=8] [--emit launch/local.sh] [--dry-run]

Variants are the product of every `--sweep KEY=V1,V2` axis, or what the experiment file declares in
`get_sweep(arg) -> list[dict]` (big_vision style; `--sweep` then adds axes to each). Each (variant, seed) is one
run: exactly `python -m swerl_jax.train --config=FILE --workdir=DIR/runs/NAME --config.KEY=VALUE ...
--config.seed=SEED` in a subprocess, its output in `DIR/runs/NAME/train.log`. Every override is checked against the
config (types, values, keys; `swerl_jax.resolve.resolve_config`) before the first run starts.

NAME is the run's result-changing overrides, sorted by key, then its seed (`sweepdir.run_name`): flag order and
operational flags (`rundir.OPERATIONAL_KEYS`: logging.*, eval.*, checkpoint cadence, ...) do not change it, so a
re-run with the flags swapped or a progress bar switched finds every run it finished. A run an earlier sweep named
otherwise (older code put every fixed override, then `--set`, in the name) is found by its `config.json` and used
where it is. A finished run (`rundir.is_finished`) is skipped, an interrupted one resumes, a failed one is recorded
and the sweep goes on; a directory of the planned name holding another config's checkpoints is reported (`conflict`),
never counted or trained over. One line per run as it starts and as it ends (name, status, wall time, directory).
Ctrl-C stops the run in progress (SIGINT to its process group: the trainer closes its sampler, workers and checkpoint
writes) and prints one line: the command that resumes.

`DIR/index.json` lists every run: name, overrides, seed, status (done | failed | pending | running | conflict),
workdir, log, the last logged metrics; `planned` names the runs of the last command. It is written atomically at
every change and always lists every run the directory holds (runs of other seeds or commands stay listed).
`--emit SCRIPT` writes `DIR/commands.sh`, one launcher line per run, instead of running (not with `--share-sft`,
which only the sweep's own runs can honour: refused); `--dry-run` checks and reports the runs and writes nothing.

`--share-sft` (with `--sft-from OTHER_SWEEP_DIR ...`): ablations of the RL stage (RL vs SFT, GRPO++ switches) all
start from the same seeded SFT stage. A run whose resolved config equals a finished run's in everything but `rl.*`
(`rl.task` excepted: it picks the SFT trainer) and the operational keys starts from a copy of that run's `sft/`
directory (checkpoints with their integrity manifests, metrics, held-out eval), noted in `sft/shared_from.json`;
`python -m swerl_jax.train` then resumes a finished SFT stage instead of training it again. The SFT stage is
deterministic for a seed (`make demo`'s metrics repeat bit for bit), so this changes no result, only the time.
With `--seed-key rl.seed` each seed sets only the GRPO stage's seed (`rl.seed`: its prompt order and sampling), so
every run shares one SFT stage and one set of held-out tasks: RL seeds from one SFT policy, as the paper's arms
start from one base model (the interval then covers the RL stage's seed variance, not the SFT stage's).
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, NoReturn

from swerl_jax import sweepdir
from swerl_jax.cli import run_cli
from swerl_jax.config import OVERRIDE_HELP, load_experiment_config, parse_value, set_key, split_overrides
from swerl_jax.data.paths import blocking_file
from swerl_jax.process_group import run_child
from swerl_jax.resolve import resolve_config
from swerl_jax.runs import rundir

REPO = pathlib.Path(__file__).resolve().parents[1]
PROG = "python -m swerl_jax.sweep"
SEED_KEYS = ("seed", "rl.seed")  # what --seeds sets: the whole run's seed, or the GRPO stage's alone


def parse_axes(config: Any, specs: list[str]) -> list[tuple[str, list[Any]]]:
    """`["reward.kind=continuous,discrete", ...]` -> [(key, typed values), ...]; errors name the key."""
    axes = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not values:
            raise ValueError(f"--sweep {spec!r}: expected KEY=V1,V2,...")
        axes.append((key, [parse_value(config, key, v) for v in values.split(",")]))
    return axes


def plan_runs(config_arg: str, axes: list[tuple[str, list[Any]]], seeds: list[int], fixed: dict[str, Any],
              check_files: bool = True, variants: list[int] | None = None, seed_key: str = "seed") -> list[dict]:
    """Every (variant, seed) run with its overrides, each checked by `resolve_config` before anything runs
    (`check_files`: also that its data and model files exist here; off when only emitting commands or in a dry
    run, which checks a paper-scale sweep on a machine without its checkpoints and data). `variants`
    keeps only those positions of the experiment's declared `get_sweep` list. Two runs that would train the same
    thing (they differ only in operational keys, or set what the config already holds) are an error. `seed_key`:
    the config key each seed sets (`seed`, or `rl.seed`: RL seeds that share one SFT stage)."""
    if seed_key not in SEED_KEYS:
        raise ValueError(f"--seed-key {seed_key}: expected one of {', '.join(SEED_KEYS)}")
    if seed_key in fixed or any(seed_key == k for k, _ in axes):
        raise ValueError(f"{seed_key} is both the --seed-key and set by --config/--sweep: give it one of the two")
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
    runs, seen = [], {}
    for base_overrides in declared:
        for combo in itertools.product(*[[(k, v) for v in values] for k, values in axes]):
            overrides = {**fixed, **base_overrides, **dict(combo)}
            for seed in seeds:
                config = load_experiment_config(config_arg)
                for key, value in {**overrides, seed_key: seed}.items():
                    set_key(config, key, value)
                resolved = resolve_config(config, check_files=check_files)  # a bad override fails here, naming the key
                as_json = json.loads(resolved.to_json())
                run = {"name": sweepdir.run_name(overrides, seed, as_json, seed_key), "overrides": overrides,
                       "seed": seed, "seed_key": seed_key,
                       "sft_steps": int(config.sft.num_steps), "rl_steps": int(config.rl.num_steps),
                       "config": as_json}
                twin = seen.setdefault(sweepdir.result_identity(as_json), run)
                if twin is not run:  # one directory, one result: the second would only retrain (or clash)
                    differ = sorted(k for k in set(overrides) | set(twin["overrides"])
                                    if overrides.get(k, "<unset>") != twin["overrides"].get(k, "<unset>"))
                    why = (f"they differ only in {', '.join(differ)}, which change no result (an operational key, "
                           "or the value the config already holds)" if differ else "a seed or value listed twice")
                    raise ValueError(f"two runs of the sweep would train the same thing ({run['name']}): {why}; "
                                     "drop one of the values")
                runs.append(run)
    return runs


def train_command(config_arg: str, workdir: pathlib.Path, overrides: dict[str, Any], seed: int,
                  launcher: str = "", seed_key: str = "seed") -> list[str]:
    """The command of one run: `python -m swerl_jax.train ...`, or `LAUNCHER CONFIG ...` for a launch script."""
    flags = [f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in {**overrides, seed_key: seed}.items()]
    path = config_arg
    if launcher:
        return [launcher, path, *flags]
    return [sys.executable, "-m", "swerl_jax.train", f"--config={path}", *flags]


def _shown(path: pathlib.Path) -> str:
    """`path` relative to the working directory when it lies under it (what the user typed), else absolute."""
    try:
        return str(path.relative_to(pathlib.Path.cwd()))
    except ValueError:
        return str(path)


def _say(line: str) -> None:
    print(line, flush=True)


def _add_results(entry: dict, run_dir: pathlib.Path) -> None:
    entry["final"] = sweepdir.last_metrics(run_dir)
    if (run_dir / "sft" / "eval.json").is_file():  # the SFT stage's held-out metric (train.evaluate_sft)
        entry["sft_eval"] = json.loads((run_dir / "sft" / "eval.json").read_text())


def run_sweep(config_arg: str, workdir: str | os.PathLike, axes: list[tuple[str, list[Any]]], seeds: list[int],
              fixed: dict[str, Any] | None = None, emit: str = "", dry_run: bool = False,
              runner: Any = None, variants: list[int] | None = None, share_sft: bool = False,
              sft_from: list[str | os.PathLike] = (), seed_key: str = "seed") -> dict:
    """Run (or emit) every run of the sweep; returns the index, also written to `workdir/index.json` (not by a
    `dry_run`, which writes nothing). `runner` stands in for `run_child` (subprocess.run's signature).
    `share_sft`: start a run from a finished run's identical SFT stage (this sweep's or `sft_from` sweeps')."""
    root = pathlib.Path(workdir).resolve()
    runner = runner or run_child
    # config and launcher absolute where found, once: runs start in the repository root (issue 46 held-out, item 3)
    from swerl_jax.config import config_file_arg

    path, sep, arg = config_file_arg(config_arg).partition(":")
    config_arg = os.path.abspath(path) + sep + arg
    if sft_from and not share_sft:
        raise ValueError("--sft-from names sweeps whose SFT stages --share-sft reuses: pass --share-sft too")
    if emit and share_sft:  # sharing copies a finished stage just before a run starts: only the sweep itself can
        raise ValueError("--share-sft with --emit: the sweep copies a finished SFT stage into a run just before it "
                         "starts, which a launcher's lines (run in any order, or at once) cannot wait for, so each "
                         "emitted command would train its own SFT stage; run the sweep without --emit to share "
                         "them, or drop --share-sft to emit")
    if emit and not (pathlib.Path(emit).is_file() or (REPO / emit).is_file() or shutil.which(emit)):
        near = difflib.get_close_matches(emit, [str(p) for p in pathlib.Path(emit).parent.glob("*")], n=1)
        raise FileNotFoundError(f"--emit {emit}: no such launcher" + (f" (did you mean {near[0]}?)" if near else ""))
    if emit and (pathlib.Path(emit).is_file() or (REPO / emit).is_file()):  # a bare name on PATH stays as typed
        emit = os.path.abspath(emit) if pathlib.Path(emit).is_file() else str(REPO / emit)
    for other in sft_from:
        if not (pathlib.Path(other) / "runs").is_dir():
            raise FileNotFoundError(f"--sft-from {other}: no runs/ folder there (not a sweep's --workdir)")
    runs = plan_runs(config_arg, axes, seeds, fixed or {}, check_files=not (emit or dry_run), variants=variants,
                     seed_key=seed_key)
    base_config = json.loads(resolve_config(load_experiment_config(config_arg), check_files=False).to_json())
    existing = sweepdir.scan_runs(root / "runs")
    claimed = {r["name"] for r in runs}  # a planned run's own name is never another run's "found" directory
    index = {"config": config_arg, "axes": [[k, v] for k, v in axes], "seeds": seeds, "seed_key": seed_key,
             "planned": [], "runs": []}
    before = {e.get("name"): e for e in (sweepdir.read_index(root) or {}).get("runs", []) if isinstance(e, dict)}
    planned = []  # (run, its index entry, how its directory was found, detail)
    for r in runs:
        run_dir, how, detail = sweepdir.locate_run(root / "runs", r["name"], r["config"], existing, claimed)
        claimed.add(run_dir.name)
        entry = {"name": run_dir.name, "overrides": r["overrides"], "seed": r["seed"], "seed_key": seed_key,
                 "workdir": str(run_dir),
                 "log": str(run_dir / "train.log"), "status": "pending"}
        # what an earlier command recorded of this run (its wall time, exit status, whose SFT stage it copied)
        entry.update({k: v for k, v in before.get(run_dir.name, {}).items()
                      if k in ("started", "seconds", "returncode", "sft_shared_from")})
        if how == "found":
            entry["planned_name"] = r["name"]
        if how == "conflict":
            entry.update(status="conflict", conflict=detail)
        elif rundir.is_finished(rundir.latest_steps(run_dir), r["sft_steps"], r["rl_steps"]):
            entry["status"] = "done"
        _add_results(entry, run_dir)
        index["planned"].append(entry["name"])
        index["runs"].append(entry)
        planned.append((r, entry, how, detail))

    def save() -> None:  # every write lists every run: this command's and whatever else the directory holds
        if not dry_run:
            sweepdir.write_index(root, sweepdir.merged_index(root, index, base_config))

    if not dry_run:
        root.mkdir(parents=True, exist_ok=True)
    if emit:
        lines = [shlex.join(train_command(config_arg, pathlib.Path(e["workdir"]), r["overrides"], r["seed"], emit,
                                             seed_key))
                 if e["status"] != "conflict" else f"# {e['name']}: not run, its directory holds another config"
                 for r, e, _, _ in planned]
        if dry_run:  # --dry-run writes nothing: the commands go to stdout
            print("\n".join(lines), flush=True)
        else:
            (root / "commands.sh").write_text("#!/usr/bin/env bash\n# one line per run of the sweep\n"
                                              + "\n".join(lines) + "\n")
    save()
    for i, (r, entry, how, detail) in enumerate(planned, 1):
        tag, run_dir = f"sweep [{i}/{len(planned)}]", pathlib.Path(entry["workdir"])
        shown = _shown(run_dir)  # the run's name is its directory's: one path says which run and where it is
        if how == "found":
            _say(f"{tag} {r['name']}: found as {shown} (named by an earlier sweep; the same result-changing "
                 f"config{detail}): using it")
        if entry["status"] == "conflict":
            _say(f"{tag} conflict {shown}: it holds checkpoints of a run with another config ({detail}); not "
                 "run: move that directory away to train this run there")
            continue
        if entry["status"] == "done":
            _say(f"{tag} done {shown} (finished earlier)")
            continue
        if emit or dry_run:
            _say(f"{tag} pending {shown}" + (" (dry run: not started)" if dry_run else ""))
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        if share_sft and r["sft_steps"] > 0:
            source = sweepdir.share_sft_stage(run_dir, r["config"], [root / "runs"] + [pathlib.Path(d) / "runs"
                                                                              for d in sft_from])
            if source is not None:
                entry["sft_shared_from"] = str(source)
        entry.update(status="running", started=time.strftime("%Y-%m-%dT%H:%M:%S"))
        save()
        _say(f"{tag} start {shown} (its output: train.log there)")
        t0 = time.monotonic()
        try:
            with open(run_dir / "train.log", "a") as log:
                command = train_command(config_arg, run_dir, r["overrides"], r["seed"], seed_key=seed_key)
                proc = runner(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=False)
        except BaseException:  # Ctrl-C: the run stopped (run_child); it resumes from its checkpoints next time
            entry["status"] = "pending"
            _add_results(entry, run_dir)
            save()
            raise
        entry["status"] = "done" if proc.returncode == 0 else "failed"
        entry["returncode"], entry["seconds"] = proc.returncode, round(time.monotonic() - t0, 1)
        _add_results(entry, run_dir)
        save()
        failed = f" (exit {proc.returncode}: see its train.log)" if proc.returncode else ""
        _say(f"{tag} {entry['status']} {shown} in {entry['seconds']:.1f} s{failed}")
    return sweepdir.merged_index(root, index, base_config)


def _module_attr(path: str, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_swerl_sweep_experiment", path)
    if spec is None or not os.path.exists(path):
        raise FileNotFoundError(f"--config={path}: no such config file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name, None)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the sweep; 1 when a run failed or conflicts with its directory, else 0.
    Bad input and Ctrl-C raise (`cli` turns them into one line)."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="experiments/NAME.py[:arg]")
    p.add_argument("--workdir", required=True, help="the sweep's directory (runs/, index.json)")
    p.add_argument("--sweep", action="append", default=[], help="KEY=V1,V2,...: one axis (repeatable)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (the --seed-key of each run)")
    p.add_argument("--seed-key", default="seed", choices=SEED_KEYS, help="what a seed sets: `seed` (the whole run) or "
                   "`rl.seed` (the GRPO stage only: with --share-sft every seed starts from one SFT stage)")
    p.add_argument("--emit", default="", help="write DIR/commands.sh with this launcher (e.g. launch/local.sh)")
    p.add_argument("--dry-run", action="store_true", help="check and report the runs; run and write nothing")
    p.add_argument("--variants", default="", help="comma-separated positions in the config's declared sweep to run "
                   "(default: all of them)")
    p.add_argument("--share-sft", action="store_true", help="start each run from a finished run's identical SFT "
                   "stage (same config but rl.*) instead of training it again (not with --emit)")
    p.add_argument("--sft-from", action="append", default=[], help="another sweep directory whose runs' SFT stages "
                   "--share-sft may reuse (repeatable)")
    p.epilog = OVERRIDE_HELP + ": applied to every run"
    rest, overrides = split_overrides(list(sys.argv[1:] if argv is None else argv))
    args = p.parse_args(rest)
    taken = blocking_file(args.workdir)
    if taken is not None:  # a dry run said "pending" and the real one failed with an errno
        raise FileExistsError(f"--workdir {args.workdir}: {taken} is a file, not a folder")
    base = load_experiment_config(args.config)
    axes = parse_axes(base, args.sweep)
    fixed = {key: parse_value(base, key, text) for key, text in overrides}
    both = sorted(set(fixed) & {k for k, _ in axes})
    if both:  # which one wins would be an accident of the merge order
        raise ValueError(f"{both[0]} is both swept (--sweep) and fixed (--config.{both[0]}): give it one "
                         "of the two")
    seeds, variants = _integers("--seeds", args.seeds), _integers("--variants", args.variants)
    index = run_sweep(args.config, args.workdir, axes, seeds, fixed, emit=args.emit, dry_run=args.dry_run,
                      variants=variants or None, share_sft=args.share_sft, sft_from=args.sft_from,
                      seed_key=args.seed_key)
    planned = set(index["planned"])
    statuses = [r["status"] for r in index["runs"] if r["name"] in planned]
    others = len(index["runs"]) - len(statuses)
    print(f"sweep {args.workdir}: {len(statuses)} runs, {statuses.count('done')} done, "
          f"{statuses.count('failed')} failed, {statuses.count('pending')} pending"
          + (f", {statuses.count('conflict')} in conflict" if "conflict" in statuses else "")
          + (f"; index.json also lists {others} other run(s) of this directory" if others else "")
          + ("" if not args.dry_run else " (dry run: nothing written)"), flush=True)
    return int("failed" in statuses or "conflict" in statuses)


def _integers(flag: str, text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected comma-separated integers") from None


def cli(argv: list[str] | None = None) -> NoReturn:
    """`python -m swerl_jax.sweep`: `main`, with bad input as one line (exit 2) and Ctrl-C, SIGTERM or a closed
    terminal as one line naming the command that resumes the sweep (exit 130), the run in progress stopped."""
    argv = sys.argv[1:] if argv is None else list(argv)
    resume = f"run the same command again: {PROG} {shlex.join(argv)}"
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a scheduler's stop or a closed terminal: stop the run, as Ctrl-C
        if signal.getsignal(sig) is signal.SIG_DFL:  # not where the caller chose otherwise (nohup ignores SIGHUP)
            previous[sig] = signal.signal(sig, _interrupt)
    try:
        run_cli(PROG, main, resume=resume, argv=argv, exit_code=int)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    cli()
