"""A sweep's runs compared with their uncertainty: per-variant means with 95% t-intervals over seeds, and paired
differences between variants (paired by seed: the same seed means the same init, data order and sampler seeds).

    index = load_sweep("sweeps/reward_kind")                     # swerl_jax.sweep's index.json, runs' metrics
    values = final_values(index, "eval/score")                   # {variant: {seed: value}}
    print(to_markdown(variant_table(index, ["eval/score", "eval/format_rate"])))
    paired_difference(values["reward.kind=discrete"], values["reward.kind=continuous"])

With 3 seeds a t-interval is wide (t(0.975, 2) = 4.30): the tables say so rather than hide it.
`step_curves` gives the per-seed curves by step (notebooks/ablation_analysis.ipynb draws them), `paired_table` the
paired differences of several metrics, and `ensure_sweep` a tiny real sweep when no sweep directory is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from swerl_jax.analysis.rewards import format_number
from swerl_jax.config import load_experiment_config, parse_value
from swerl_jax.runs.metrics import read_metrics


@dataclasses.dataclass(frozen=True)
class Interval:
    """A mean with its two-sided 95% t-interval over `n` values (lo = hi = mean when n < 2)."""

    mean: float
    lo: float
    hi: float
    n: int

    def text(self, scale: float = 1.0, digits: int = 3) -> str:
        """`mean [lo, hi]` (times `scale`), each as `rewards.format_number` writes it (2e-4 is not 0.000)."""
        return (f"{format_number(self.mean * scale, digits)} [{format_number(self.lo * scale, digits)}, "
                f"{format_number(self.hi * scale, digits)}]")


def load_sweep(workdir: str | pathlib.Path) -> dict:
    """The sweep's index.json with each run's metrics rows attached (`rows`: [] for a run that logged none).

    A run without GRPO rows that evaluated its SFT stage (`sft/eval.json`, written by `python -m swerl_jax.train`
    with eval.every_steps > 0) gets that evaluation as its one row: an SFT-only run (the RL-vs-SFT baseline) is
    then compared on the same `eval/*` metrics as the RL runs. That row's `step` is 0 (the policy before any GRPO
    step, on the curves' GRPO-step axis) and `sft_step` the SFT stage's step."""
    root = pathlib.Path(workdir)
    index = json.loads((root / "index.json").read_text())
    for run in index["runs"]:
        path = pathlib.Path(run["workdir"]) / "metrics.jsonl"
        run["rows"] = read_metrics(path) if path.exists() else []
        sft_eval = pathlib.Path(run["workdir"]) / "sft" / "eval.json"
        if not run["rows"] and sft_eval.is_file():
            try:
                row = dict(json.loads(sft_eval.read_text()))
            except (ValueError, TypeError) as e:
                raise ValueError(f"{sft_eval}: not an SFT eval row ({e})") from None
            run["rows"] = [{**row, "sft_step": row.get("step"), "step": 0}]
    return index


def variant_name(run: Mapping, varying: Sequence[str]) -> str:
    """`key=value,...` over the overrides that differ between the sweep's runs and that this run sets; "base" for
    a run that sets none of them (an experiment's declared sweep often starts with its config as it is, `{}`), and
    "all" when nothing varies."""
    if not varying:
        return "all"
    return ",".join(f"{k}={run['overrides'][k]}" for k in varying if k in run["overrides"]) or "base"


def varying_keys(index: Mapping) -> list[str]:
    """Override keys whose value is not the same in every run (what the sweep compares)."""
    keys = sorted({k for run in index["runs"] for k in run["overrides"]})
    return [k for k in keys if len({json.dumps(run["overrides"].get(k)) for run in index["runs"]}) > 1]


def final_value(rows: Sequence[Mapping], metric: str, last: int = 1) -> float:
    """The mean of `metric` over the last `last` rows that log it (NaN when none does)."""
    if last < 1:
        raise ValueError(f"last={last}: the number of final rows to average, >= 1")
    values = [float(r[metric]) for r in rows if metric in r][-last:]
    return float(np.mean(values)) if values else math.nan


def logged_metrics(index: Mapping) -> set[str]:
    """Every key that some finished run of a loaded sweep logged."""
    return {key for run in index["runs"] if run.get("status") == "done" for row in run["rows"] for key in row}


def split_logged(index: Mapping, metrics: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the `metrics` some finished run logged, those none did), each in the given order: a sweep without held-out
    eval (eval.every_steps=0) has no eval/* to draw, and an analysis leaves them out, saying so, not failing."""
    logged = logged_metrics(index)
    return [m for m in metrics if m in logged], [m for m in metrics if m not in logged]


def require_metric(index: Mapping, metric: str) -> list[Mapping]:
    """The sweep's finished runs; KeyError (with a did-you-mean) when none logs `metric`: a typo would otherwise be
    a table of nan [nan, nan] or an empty figure."""
    done = [run for run in index["runs"] if run.get("status") == "done"]
    logged = logged_metrics(index)
    if done and metric not in logged:
        close = difflib.get_close_matches(metric, sorted(logged), n=1)
        raise KeyError(f"metric {metric!r} is logged by no finished run of the sweep"
                       + (f" (did you mean {close[0]!r}?)" if close else ""))
    return done


def final_values(index: Mapping, metric: str, last: int = 1) -> dict[str, dict[int, float]]:
    """{variant: {seed: final value of `metric`}} over the finished runs of a loaded sweep."""
    varying = varying_keys(index)
    done = require_metric(index, metric)
    out: dict[str, dict[int, float]] = {}
    for run in done:
        out.setdefault(variant_name(run, varying), {})[int(run["seed"])] = final_value(run["rows"], metric, last)
    return out


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean and two-sided t-interval of `values` (sample standard deviation, n - 1 degrees of freedom)."""
    x = np.asarray([v for v in values if not math.isnan(v)], np.float64)
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, mean, mean, n)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return Interval(mean, mean - half, mean + half, n)


def paired_difference(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[Interval, float]:
    """(a - b over the seeds both have, with its t-interval; the paired t-test's two-sided p-value, NaN when fewer
    than 2 seeds pair up or the difference is the same on every seed, to rounding: 0.3 - 0.7 and 0.1 - 0.5 differ
    in the last bit, and a t-test on that leftover would call it significant)."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    interval = t_interval(diffs)
    if len(diffs) < 2 or np.allclose(diffs, diffs[0], rtol=1e-9, atol=1e-12):
        return interval, math.nan
    return interval, float(stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds]).pvalue)


def _last(last: int | Mapping[str, int], metric: str) -> int:
    return int(last.get(metric, 1)) if isinstance(last, Mapping) else int(last)


def variant_table(index: Mapping, metrics: Sequence[str], last: int | Mapping[str, int] = 1) -> list[dict]:
    """One row per variant: for each metric the mean [95% interval] over seeds, and the seed count. `last`: rows
    averaged per run (see `final_value`), one number for every metric or {metric: rows} (1 for those not named)."""
    per_metric = {m: final_values(index, m, _last(last, m)) for m in metrics}
    variants = sorted({v for values in per_metric.values() for v in values})
    rows = []
    for v in variants:
        row = {"variant": v, "seeds": max(len(per_metric[m].get(v, {})) for m in metrics)}
        for m in metrics:
            row[m] = t_interval(list(per_metric[m].get(v, {}).values())).text()
        rows.append(row)
    return rows


def to_markdown(rows: Sequence[Mapping]) -> str:
    """A markdown table of `rows` (dicts with the same keys)."""
    if not rows:
        return ""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def paired_table(index: Mapping, metrics: Sequence[str], pairs: Sequence[Sequence[str]],
                 last: int | Mapping[str, int] = 1) -> list[dict]:
    """One row per (pair (a, b), metric): a - b paired by seed, with its 95% interval and the paired t-test's
    p-value ("n/a" when the difference is the same on every seed, or fewer than 2 seeds pair up)."""
    rows = []
    for a, b in pairs:
        for m in metrics:
            values = final_values(index, m, _last(last, m))
            for v in (a, b):
                if v not in values:
                    raise KeyError(f"no finished run of variant {v!r}; the sweep's variants: {sorted(values)}")
            diff, p = paired_difference(values[a], values[b])
            rows.append({"comparison": f"{a} - {b}", "metric": m, "seeds": diff.n, "difference": diff.text(),
                         "p": "n/a" if math.isnan(p) else f"{p:.3g}"})
    return rows


@dataclasses.dataclass(frozen=True)
class SeedCurves:
    """One variant's curves of a metric: `values[i, j]` is seed `seeds[i]` at step `steps[j]` (NaN where that
    seed did not log the metric at that step)."""

    steps: np.ndarray
    seeds: list[int]
    values: np.ndarray

    def mean(self) -> np.ndarray:
        return np.nanmean(self.values, axis=0)

    def min(self) -> np.ndarray:
        return np.nanmin(self.values, axis=0)

    def max(self) -> np.ndarray:
        return np.nanmax(self.values, axis=0)


def step_curves(index: Mapping, metric: str) -> dict[str, SeedCurves]:
    """{variant: its seeds' curves of `metric` by step} over the finished runs of a loaded sweep (variants where
    no run logged the metric are left out)."""
    varying = varying_keys(index)
    per_variant: dict[str, dict[int, dict[int, float]]] = {}
    for run in require_metric(index, metric):
        points = {int(r["step"]): float(r[metric]) for r in run["rows"] if metric in r and "step" in r}
        if points:
            per_variant.setdefault(variant_name(run, varying), {})[int(run["seed"])] = points
    out = {}
    for variant, by_seed in sorted(per_variant.items()):
        seeds = sorted(by_seed)
        steps = sorted({s for points in by_seed.values() for s in points})
        values = np.array([[by_seed[seed].get(s, math.nan) for s in steps] for seed in seeds], np.float64)
        out[variant] = SeedCurves(np.asarray(steps), seeds, values)
    return out


# A real sweep that runs in about a minute on 2 cores: no SFT, 2 GRPO steps of tiny_cpu with 8-token answers (every
# answer is cut short and scored -1: a smoke test of the machinery, not a result), held-out eval after each step.
TINY_SWEEP = {"sft.num_steps": 0, "rl.num_steps": 2, "sampler.mode": "inline", "sampler.max_new_tokens": 8,
              "reward.num_workers": 1, "eval.every_steps": 1, "eval.num_records": 2,
              "logging.progress_bar": False, "logging.tensorboard": False}
TINY_SWEEP_CONFIG = "experiments/ablations/reward_kind.py:cpu"


def run_tiny_sweep(workdir: str | os.PathLike, config: str = TINY_SWEEP_CONFIG, seeds: Sequence[int] = (0, 1),
                   settings: Mapping | None = None, jobs: int | None = None, timeout_s: float = 900.0) -> pathlib.Path:
    """`python -m swerl_jax.sweep --config=CONFIG --seeds S --config.K=V ...` (TINY_SWEEP's settings), one seed per
    process with up to `jobs` at once (default: one per CPU core) on one CPU device each, then one pass over all
    seeds that finds every run finished and writes the whole index (as ABLATIONS.md's sweep was run).

    Raises RuntimeError with the failing seed's output when a run fails.
    """
    from swerl_jax import sweep

    root = pathlib.Path(workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    settings = dict(TINY_SWEEP if settings is None else settings)
    sets = [f"--config.{k}={v}" for k, v in settings.items()]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"),
               XLA_FLAGS="--xla_force_host_platform_device_count=1")
    env.pop("MPLBACKEND", None)
    jobs = max(1, min(len(seeds), jobs or os.cpu_count() or 1))
    pending = list(seeds)
    running: list[tuple[int, subprocess.Popen]] = []
    while pending or running:
        while pending and len(running) < jobs:
            seed = pending.pop(0)
            cmd = [sys.executable, "-m", "swerl_jax.sweep", f"--config={config}", f"--workdir={root}",
                   f"--seeds={seed}", *sets]
            log = root / f"sweep-seed-{seed}.log"
            with open(log, "w") as f:
                running.append((seed, subprocess.Popen(cmd, cwd=sweep.REPO, env=env, stdout=f,
                                                       stderr=subprocess.STDOUT)))
        seed, proc = running.pop(0)
        if proc.wait(timeout=timeout_s) != 0:
            logs = [root / f"sweep-seed-{seed}.log", *root.glob(f"runs/*seed-{seed}/train.log")]
            tail = "\n".join(p.read_text()[-2000:] for p in logs)
            raise RuntimeError(f"tiny sweep, seed {seed}: exit {proc.returncode}\n{tail}")

    def must_not_run(cmd, **_):
        raise RuntimeError(f"run not finished after its sweep: {cmd}")

    with contextlib.chdir(sweep.REPO):  # where the runs ran: CONFIG and the data paths are relative to it
        base = load_experiment_config(config)
        fixed = {k: parse_value(base, k, str(v)) for k, v in settings.items()}
        sweep.run_sweep(config, root, [], list(seeds), fixed, runner=must_not_run)
    return root


def ensure_sweep(sweep_dir: str = "", root: str | os.PathLike | None = None) -> tuple[pathlib.Path, str]:
    """(a sweep directory, "given" | "tiny") for a notebook: `sweep_dir` when given (it must hold an index.json),
    else a new folder under `root` (default: the system temp folder) with `run_tiny_sweep`'s sweep."""
    if sweep_dir:
        path = pathlib.Path(sweep_dir).expanduser()
        if not (path / "index.json").is_file():
            # the absolute path: a relative one is read from the kernel's folder, which may not be the user's
            raise FileNotFoundError(f"sweep_dir={str(path.absolute())!r} has no index.json: make one with python -m "
                                    f"swerl_jax.sweep --config=... --seeds 0,1,2 --workdir {sweep_dir}")
        return path, "given"
    return run_tiny_sweep(tempfile.mkdtemp(prefix="swerl_sweep_", dir=root)), "tiny"


def _run_hint(path: pathlib.Path) -> str:
    """For a single run's folder given as the sweep (the usual slip): the sweep above it, else the notebooks
    that read one run; "" for any other folder."""
    if not ((path / "config.json").is_file() or (path / "metrics.jsonl").is_file()):
        return ""
    # a sweep keeps its runs at SWEEP/runs/NAME: a few levels up, not any index.json far above
    above = next((p for p in list(path.absolute().parents)[:3] if (p / "index.json").is_file()), None)
    if above is not None:
        return f"; {path} is one run of the sweep {above}: give it"
    return (f"; {path} is a single run (config.json, metrics.jsonl), not a sweep: for one run use the notebooks, "
            f"python notebooks/run_notebooks.py advantage_analysis.ipynb --out OUT -p workdir={path}")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m swerl_jax.analysis.ablations SWEEP_DIR [--metric M]... [--pair A B]... [--last N]`: per variant
    the final values (mean [95% t-interval] over seeds), then each pair's difference paired by seed, as
    markdown; the notebook draws the same numbers as curves."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m swerl_jax.analysis.ablations", description=main.__doc__)
    p.add_argument("sweep_dir", help="a directory of python -m swerl_jax.sweep (its index.json)")
    p.add_argument("--metric", action="append", default=[], help="a logged metric (repeatable; default: "
                   "reward_mean and every eval/* the finished runs logged)")
    p.add_argument("--pair", action="append", nargs=2, default=[], metavar=("A", "B"),
                   help="variant A minus variant B, paired by seed (repeatable; names as the table prints them)")
    p.add_argument("--last", type=int, default=1, help="rows averaged per run for its final value")
    args = p.parse_args(argv)
    if not (pathlib.Path(args.sweep_dir) / "index.json").is_file():
        raise FileNotFoundError(f"{args.sweep_dir}: no index.json there (a sweep directory of python -m "
                                "swerl_jax.sweep)" + _run_hint(pathlib.Path(args.sweep_dir)))
    index = load_sweep(args.sweep_dir)
    metrics = args.metric or ["reward_mean", *sorted(m for m in logged_metrics(index) if m.startswith("eval/"))]
    metrics, absent = split_logged(index, metrics) if not args.metric else (metrics, [])
    print(f"{args.sweep_dir}: {sum(r.get('status') == 'done' for r in index['runs'])} finished runs of "
          f"{len(index['runs'])}; varying {', '.join(varying_keys(index)) or 'nothing'}"
          + (f"; not logged: {', '.join(absent)}" if absent else ""))
    for run in index["runs"]:  # failed, running, pending or conflicting: named, so no seed goes missing unseen
        if run.get("status") != "done":
            print(f"  not in the tables ({run.get('status')}): {run.get('name')}")
    print(to_markdown(variant_table(index, metrics, args.last)))
    if args.pair:
        print()
        print(to_markdown(paired_table(index, metrics, args.pair, args.last)))
    return 0


if __name__ == "__main__":
    from swerl_jax.cli import run_cli

    run_cli("python -m swerl_jax.analysis.ablations", main)
