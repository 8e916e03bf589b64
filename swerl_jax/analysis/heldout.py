"""Held-out tasks paired one by one: two variants of a sweep compared on the very tasks both answered.

A seed-paired t-interval (`ablations.paired_table`) treats the held-out set as fixed and asks how much the seeds
move the difference. This module asks the other question: how much would the difference move on another draw of
held-out tasks? Each run's last evaluation keeps one row per answer (`WORKDIR/eval/heldout_V.jsonl`, or the SFT
stage's `sft/eval_rows.jsonl` for a run without GRPO steps), so a difference can be taken per (seed, task) and the
tasks resampled:

    index = ablations.load_sweep("sweeps/testbed")
    task_difference(index, "base", "rl.num_steps=0", "resolved")   # -> TaskDifference(mean, lo, hi, tasks, seeds)

Per task the difference is averaged over the seeds both variants have; the interval is a percentile bootstrap over
tasks (10,000 resamples, seeded: the same sweep gives the same interval).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping

import numpy as np

from swerl_jax.analysis.ablations import require_metric, variant_name, varying_keys
from swerl_jax.analysis.rewards import format_number

# what a per-answer row is worth under each measure (the repair metric's fields)
MEASURES = {
    "resolved": lambda row: float(bool(row.get("resolved"))),
    "score": lambda row: 100.0 * max(float(row["reward"]), 0.0),
    "format": lambda row: float(float(row["reward"]) != -1.0),
}


@dataclasses.dataclass(frozen=True)
class TaskDifference:
    """a - b in `measure`, averaged over tasks (each task: the mean over seeds), with a 95% bootstrap interval."""

    mean: float
    lo: float
    hi: float
    tasks: int
    seeds: int

    def text(self, digits: int = 3) -> str:
        """`mean [lo, hi]`, each as `rewards.format_number` writes it."""
        lo, hi = format_number(self.lo, digits), format_number(self.hi, digits)
        return f"{format_number(self.mean, digits)} [{lo}, {hi}]"


def final_answers(workdir: str | pathlib.Path) -> tuple[pathlib.Path, dict[str, dict]]:
    """(the file read, {instance_id: row}) of a run's last held-out evaluation: its newest `eval/heldout_V.jsonl`,
    else its SFT stage's `sft/eval_rows.jsonl`. FileNotFoundError names the run when it kept neither."""
    root = pathlib.Path(workdir)
    files = sorted((root / "eval").glob("heldout_*.jsonl")) or [p for p in [root / "sft" / "eval_rows.jsonl"]
                                                                  if p.is_file()]
    if not files:
        raise FileNotFoundError(f"{root}: no per-answer held-out rows (eval/heldout_V.jsonl or sft/eval_rows.jsonl); "
                                "runs evaluated before they were kept have only their eval/* means")
    return files[-1], {row["instance_id"]: row for row in answer_rows(files[-1]) if int(row.get("sample", 0)) == 0}


def answer_rows(path: pathlib.Path) -> list[dict]:
    """The rows of a per-answer JSONL file; ValueError naming the file, line and key for a line that is not a JSON
    object with an instance_id (a finished run's file is whole: a torn line there is damage, not data to skip)."""
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from None
        if not isinstance(row, dict) or "instance_id" not in row:
            raise ValueError(f"{path}:{lineno}: not an answer row (a JSON object with an instance_id)")
        rows.append(row)
    return rows


def task_difference(index: Mapping, a: str, b: str, measure: str = "resolved", resamples: int = 10_000
                    ) -> TaskDifference:
    """Variant `a` minus variant `b` of a loaded sweep (`ablations.load_sweep`), paired by seed and task."""
    if measure not in MEASURES:
        raise KeyError(f"measure {measure!r}: expected one of {sorted(MEASURES)}")
    value = MEASURES[measure]
    varying = varying_keys(index)
    by_variant: dict[str, dict[int, dict[str, dict]]] = {}
    for run in require_metric(index, "eval/score"):
        by_variant.setdefault(variant_name(run, varying), {})[int(run["seed"])] = final_answers(run["workdir"])[1]
    for v in (a, b):
        if v not in by_variant:
            raise KeyError(f"no finished run of variant {v!r}; the sweep's variants: {sorted(by_variant)}")
    seeds = sorted(set(by_variant[a]) & set(by_variant[b]))
    per_task: dict[str, list[float]] = {}
    for s in seeds:
        left, right = by_variant[a][s], by_variant[b][s]
        for task in sorted(set(left) & set(right)):
            per_task.setdefault(task, []).append(value(left[task]) - value(right[task]))
    if not per_task:
        raise ValueError(f"{a} and {b} share no (seed, held-out task): nothing to pair")
    d = np.asarray([np.mean(v) for v in per_task.values()], np.float64)
    rng = np.random.default_rng(0)
    boots = d[rng.integers(0, len(d), (resamples, len(d)))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return TaskDifference(float(d.mean()), float(lo), float(hi), len(d), len(seeds))
