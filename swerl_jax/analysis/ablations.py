"""A sweep's runs compared with their uncertainty: per-variant means with 95% t-intervals over seeds, and paired
differences between variants (paired by seed: the same seed means the same init, data order and sampler seeds).

    index = load_sweep("sweeps/reward_kind")                     # swerl_jax.sweep's index.json, runs' metrics
    values = final_values(index, "eval/score")                   # {variant: {seed: value}}
    print(to_markdown(variant_table(index, ["eval/score", "eval/format_rate"])))
    paired_difference(values["reward.kind=discrete"], values["reward.kind=continuous"])

With 3 seeds a t-interval is wide (t(0.975, 2) = 4.30): the tables say so rather than hide it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from swerl_jax.metrics import read_metrics


@dataclasses.dataclass(frozen=True)
class Interval:
    """A mean with its two-sided 95% t-interval over `n` values (lo = hi = mean when n < 2)."""

    mean: float
    lo: float
    hi: float
    n: int

    def text(self, scale: float = 1.0, digits: int = 3) -> str:
        """`mean [lo, hi]` (times `scale`)."""
        return f"{self.mean * scale:.{digits}f} [{self.lo * scale:.{digits}f}, {self.hi * scale:.{digits}f}]"


def load_sweep(workdir: str | pathlib.Path) -> dict:
    """The sweep's index.json with each run's metrics rows attached (`rows`: [] for a run that logged none)."""
    root = pathlib.Path(workdir)
    index = json.loads((root / "index.json").read_text())
    for run in index["runs"]:
        path = pathlib.Path(run["workdir"]) / "metrics.jsonl"
        run["rows"] = read_metrics(path) if path.exists() else []
    return index


def variant_name(run: Mapping, varying: Sequence[str]) -> str:
    """`key=value,...` over the overrides that differ between the sweep's runs."""
    return ",".join(f"{k}={run['overrides'][k]}" for k in varying) or "all"


def varying_keys(index: Mapping) -> list[str]:
    """Override keys whose value is not the same in every run (what the sweep compares)."""
    keys = sorted({k for run in index["runs"] for k in run["overrides"]})
    return [k for k in keys if len({json.dumps(run["overrides"].get(k)) for run in index["runs"]}) > 1]


def final_value(rows: Sequence[Mapping], metric: str, last: int = 1) -> float:
    """The mean of `metric` over the last `last` rows that log it (NaN when none does)."""
    values = [float(r[metric]) for r in rows if metric in r][-last:]
    return float(np.mean(values)) if values else math.nan


def final_values(index: Mapping, metric: str, last: int = 1) -> dict[str, dict[int, float]]:
    """{variant: {seed: final value of `metric`}} over the finished runs of a loaded sweep."""
    varying = varying_keys(index)
    out: dict[str, dict[int, float]] = {}
    for run in index["runs"]:
        if run.get("status") == "done":
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
    """(a - b over the seeds both have, with its t-interval; the paired t-test's two-sided p-value)."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    interval = t_interval(diffs)
    if len(diffs) < 2 or np.std(diffs) == 0:
        return interval, math.nan
    return interval, float(stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds]).pvalue)


def variant_table(index: Mapping, metrics: Sequence[str], last: int = 1) -> list[dict]:
    """One row per variant: for each metric the mean [95% interval] over seeds, and the seed count."""
    per_metric = {m: final_values(index, m, last) for m in metrics}
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
