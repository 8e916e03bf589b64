"""Reward tables: real predictions scored against gold patches, summaries, and the format-error taxonomy."""

from __future__ import annotations

import collections
import json
import math
import os
import pathlib
import statistics
from collections.abc import Iterable, Sequence

from swerl_jax.reward import calculate_reward_unidiff

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def resolve_data_dir(data_dir: str | os.PathLike = "../shared/data") -> pathlib.Path:
    """The real-data folder: absolute as given, else relative to the repo root, else to the working directory.

    Raises FileNotFoundError listing every place tried.
    """
    path = pathlib.Path(data_dir).expanduser()
    candidates = [path] if path.is_absolute() else [REPO_ROOT / path, pathlib.Path.cwd() / path]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    raise FileNotFoundError(f"data_dir={str(data_dir)!r} not found; tried {[str(c) for c in candidates]}")


def _load_json_rows(path: pathlib.Path) -> list[dict]:
    """Rows of a JSON array file or a JSONL file; errors name the file (and line)."""
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON array of objects")
        return rows
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from e
    return rows


def changed_lines(patch: str) -> int:
    """Number of added plus removed lines of a unified diff (file headers excluded)."""
    count = 0
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line.startswith(("+", "-")):
            count += 1
    return count


def score_predictions(
    preds_path: str | os.PathLike,
    gold_path: str | os.PathLike,
    pred_key: str = "model_patch",
    gold_key: str = "patch",
) -> list[dict]:
    """The unidiff reward of every prediction against its instance's gold patch.

    One row per prediction: instance_id, reward (continuous, `calculate_reward_unidiff`), exact (the
    discrete reward: 1.0 when every changed file's normalised diff equals the gold one, which is exactly
    a similarity of 1.0), empty (no predicted patch), gold_lines / pred_lines (changed lines), gold_files.
    Raises ValueError naming the file and the instance when a row lacks a key or has no gold patch.
    """
    preds_path, gold_path = pathlib.Path(preds_path), pathlib.Path(gold_path)
    gold = {}
    for i, row in enumerate(_load_json_rows(gold_path)):
        if "instance_id" not in row or gold_key not in row:
            raise ValueError(f"{gold_path} row {i}: missing 'instance_id' or {gold_key!r}")
        gold[row["instance_id"]] = row[gold_key]
    rows = []
    for i, pred in enumerate(_load_json_rows(preds_path)):
        iid = pred.get("instance_id")
        if iid is None or pred_key not in pred:
            raise ValueError(f"{preds_path} row {i}: missing 'instance_id' or {pred_key!r}")
        if iid not in gold:
            raise ValueError(f"{preds_path} row {i}: instance {iid!r} has no gold patch in {gold_path}")
        pred_patch = pred[pred_key] or ""
        reward, info = calculate_reward_unidiff([gold[iid]], [pred_patch])
        rows.append({
            "instance_id": iid,
            "reward": reward,
            "exact": 1.0 if reward == 1.0 else 0.0,
            "empty": not pred_patch.strip(),
            "gold_lines": changed_lines(gold[iid]),
            "pred_lines": changed_lines(pred_patch),
            "gold_files": sum(1 for line in gold[iid].splitlines() if line.startswith("diff --git")),
            "files_scored": len(info["similarities"]),
        })
    return rows


def summarize(values: Iterable[float]) -> dict:
    """n, mean, std (population), min, median, max of finite values; NaN statistics when there are none."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return {"n": 0, "mean": math.nan, "std": math.nan, "min": math.nan, "median": math.nan, "max": math.nan}
    return {"n": len(xs), "mean": statistics.fmean(xs), "std": statistics.pstdev(xs), "min": min(xs),
            "median": statistics.median(xs), "max": max(xs)}


def group_mean(rows: Sequence[dict], by: str, value: str) -> list[dict]:
    """Mean, std and count of `value` for each distinct `by`, sorted by `by`."""
    groups: dict = collections.defaultdict(list)
    for row in rows:
        groups[row[by]].append(row[value])
    return [{by: key, **{k: v for k, v in summarize(vals).items() if k in ("n", "mean", "std")}}
            for key, vals in sorted(groups.items())]


def failure_reason(row: dict) -> str | None:
    """Why a rollout scored below 0: its logged "format_error", else "reward failure: <reason>" when the reward
    service could not score it (timeout, crash, NaN/inf: logged as "reward_failure"), else "unknown" for a
    negative reward with neither (runs from before these fields); None for a scored answer."""
    if row.get("format_error") is not None:
        return str(row["format_error"])
    if row.get("reward_failure") is not None:
        return f"reward failure: {row['reward_failure']}"
    return "unknown" if row["reward"] < 0 else None


def format_error_table(rollouts: Sequence[dict]) -> list[dict]:
    """Counts and fractions of each failure reason over rollouts ("ok" for well-formed answers), most first:
    format errors by reason, and reward-service failures as "reward failure: <reason>" (`failure_reason`)."""
    counts: collections.Counter = collections.Counter()
    for row in rollouts:
        counts[failure_reason(row) or "ok"] += 1
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))  # ties by name: stable tables
    return [{"reason": reason, "count": n, "fraction": n / total} for reason, n in ordered]


def format_errors_by_step(rollouts: Sequence[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """Per reason, (steps, fraction of that step's rollouts with that reason); "ok" excluded."""
    by_step: dict = collections.defaultdict(collections.Counter)
    for row in rollouts:
        by_step[row["step"]][failure_reason(row)] += 1
    steps = sorted(by_step)
    reasons = sorted({r for c in by_step.values() for r in c if r is not None})
    return {reason: (steps, [by_step[s][reason] / sum(by_step[s].values()) for s in steps]) for reason in reasons}


def format_number(value: float, digits: int = 3) -> str:
    """`value` with `digits` decimals, or with `digits` significant digits where those decimals would hide them
    (0 < |value| < 0.1): a learning rate of 2e-4 shows as 0.0002, never 0.000."""
    if value and math.isfinite(value) and abs(value) < 0.1:
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def to_markdown(rows: Sequence[dict], columns: Sequence[str] | None = None, digits: int = 3) -> str:
    """A Markdown table of rows (floats as `format_number` writes them), for notebook display without pandas."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())

    def cell(v: object) -> str:
        return format_number(v, digits) if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)
