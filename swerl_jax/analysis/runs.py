"""Loading a training run's workdir: ``metrics.jsonl`` and ``rollouts/step_XXXXXX.jsonl``.

The trainer writes them through `swerl_jax.runs.metrics.MetricsWriter`: one metrics row per step and one rollouts
file per step (one row per rollout). The
loader is strict about the keys every analysis needs (a clear error naming file, line and key) and
tolerant of optional ones (filled with None), so runs from older or newer trainers still load.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re

from swerl_jax.runs.metrics import METRICS_FILE, ROLLOUTS_DIR, rollout_path

REQUIRED_METRIC_KEYS = ("step",)
REQUIRED_ROLLOUT_KEYS = ("step", "prompt_id", "group", "sample", "reward")
OPTIONAL_ROLLOUT_KEYS = ("completion", "advantage", "format_error", "completion_len", "truncated")
_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")


class RunFormatError(ValueError):
    """A workdir file that cannot be analysed; the message names the file, line and key."""


@dataclasses.dataclass
class Run:
    """A loaded run: metrics rows sorted by step and rollout rows sorted by (step, group, sample)."""

    workdir: pathlib.Path
    metrics: list[dict]
    rollouts: list[dict]

    @property
    def steps(self) -> list[int]:
        """The steps that have rollouts, ascending."""
        return sorted({r["step"] for r in self.rollouts})

    def metric(self, key: str, *aliases: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric over the steps that logged it (missing, null or NaN values skipped).

        `aliases` are other names of the same metric (e.g. "reward_mean" for "reward/mean"); the first
        name any row logs is used.
        """
        names = (key, *aliases)
        key = next((k for k in names if any(k in row for row in self.metrics)), key)
        xs, ys = [], []
        for row in self.metrics:
            value = row.get(key)
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                xs.append(row["step"])
                ys.append(float(value))
        return xs, ys

    @property
    def config(self) -> dict | None:
        """The run's resolved config (workdir/config.json as the trainer wrote it); None when absent (e.g. a
        simulated run)."""
        path = self.workdir / "config.json"
        return json.loads(path.read_text()) if path.exists() else None

    def resolve_step(self, step: int) -> int:
        """`step` when it has rollouts; -1 means the last such step. ValueError lists the steps there are."""
        steps = self.steps
        if not steps:  # e.g. WORKDIR/sft given for WORKDIR: the SFT stage logs a loss, no rollouts
            raise ValueError(f"run {self.workdir} has no rollouts ({ROLLOUTS_DIR}/step_*.jsonl: GRPO steps write "
                             "them; an SFT stage's folder has none)")
        if step == -1:
            return steps[-1]
        if step not in steps:
            raise ValueError(f"step={step} has no rollouts in {self.workdir}; steps with rollouts: {steps}")
        return step

    def rollouts_at(self, step: int) -> list[dict]:
        """The rollouts of one step."""
        return [r for r in self.rollouts if r["step"] == step]


def _read_jsonl(path: pathlib.Path, required: tuple[str, ...]) -> list[dict]:
    rows = []
    lines = path.read_text(encoding="utf-8").split("\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if lineno == len(lines):
                # A torn last line (no newline yet: the trainer crashed mid-write) is not data; the
                # metrics writer drops it on resume too.
                continue
            raise RunFormatError(f"{path}:{lineno}: not valid JSON ({e})") from e
        if not isinstance(row, dict):
            raise RunFormatError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        missing = [k for k in required if k not in row or row[k] is None]
        if missing:
            raise RunFormatError(f"{path}:{lineno}: missing required key(s) {missing}")
        rows.append(row)
    return rows


def load_metrics(workdir: str | os.PathLike) -> list[dict]:
    """The rows of ``workdir/metrics.jsonl`` sorted by step; [] when the file is absent.

    Raises RunFormatError naming file and line on invalid JSON or a row without "step".
    """
    path = pathlib.Path(workdir) / METRICS_FILE
    if not path.exists():
        return []
    rows = _read_jsonl(path, REQUIRED_METRIC_KEYS)
    for row in rows:
        row["step"] = int(row["step"])
    return sorted(rows, key=lambda r: r["step"])


def _normalise_rollout(row: dict, where: str) -> dict:
    """Typed required keys, optional keys filled with None; keeps any extra keys as they are."""
    try:
        row["step"], row["group"], row["sample"] = int(row["step"]), int(row["group"]), int(row["sample"])
        row["reward"] = float(row["reward"])
    except (TypeError, ValueError) as e:
        raise RunFormatError(f"{where}: step/group/sample must be integers and reward a number ({e})") from e
    row["prompt_id"] = str(row["prompt_id"])
    for key in OPTIONAL_ROLLOUT_KEYS:
        row.setdefault(key, None)
    if row["advantage"] is not None:
        row["advantage"] = float(row["advantage"])
    if row["completion_len"] is None and isinstance(row["completion"], str):
        # No token count logged: the character count is the only length there is; flag it so plots can say so.
        row["completion_len"] = len(row["completion"])
        row["completion_len_unit"] = "chars"
    return row


def rollout_files(workdir: str | os.PathLike) -> list[tuple[int, pathlib.Path]]:
    """(step, path) of every ``rollouts/step_XXXXXX.jsonl`` in the workdir, by step."""
    folder = pathlib.Path(workdir) / ROLLOUTS_DIR
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _STEP_FILE.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def load_rollouts(workdir: str | os.PathLike, steps: list[int] | None = None) -> list[dict]:
    """All rollout rows (or those of `steps`), sorted by (step, group, sample).

    Raises RunFormatError naming file, line and key for a row without a required key or with a step that
    differs from its file name's.
    """
    wanted = None if steps is None else set(steps)
    rows = []
    for step, path in rollout_files(workdir):
        if wanted is not None and step not in wanted:
            continue
        for lineno, row in enumerate(_read_jsonl(path, REQUIRED_ROLLOUT_KEYS), 1):
            where = f"{path} row {lineno}"
            row = _normalise_rollout(row, where)
            if row["step"] != step:
                raise RunFormatError(f"{where}: step {row['step']} differs from the file's step {step}")
            rows.append(row)
    return sorted(rows, key=lambda r: (r["step"], r["group"], r["sample"]))


def load_run(workdir: str | os.PathLike) -> Run:
    """Metrics and rollouts of a run's workdir.

    Raises:
      FileNotFoundError: the workdir does not exist or holds neither metrics.jsonl nor rollouts/.
      RunFormatError: a row is malformed (file, line and key named).
    """
    root = pathlib.Path(workdir)
    if not root.is_dir():
        raise FileNotFoundError(f"run workdir {root} does not exist")
    metrics, rollouts = load_metrics(root), load_rollouts(root)
    if not metrics and not rollouts:
        raise FileNotFoundError(f"run workdir {root} has neither {METRICS_FILE} nor {ROLLOUTS_DIR}/step_*.jsonl")
    return Run(workdir=root, metrics=metrics, rollouts=rollouts)


__all__ = ["METRICS_FILE", "ROLLOUTS_DIR", "Run", "RunFormatError", "load_metrics", "load_rollouts", "load_run",
           "rollout_files", "rollout_path"]
