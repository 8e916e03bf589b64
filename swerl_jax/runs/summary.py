"""The few lines every run ends with: how the stages went, read back from the run's metrics files.

    print(summarize_run(workdir))
    # SFT   100 steps  loss 10.81 -> 0.02 (best 0.01 at step 97)  1.2 s/step
    # GRPO  30 steps   reward -0.292 -> +0.228 (best +0.850 at step 14)  malformed 65% -> 38%  exact fixes ...
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from swerl_jax.runs.metrics import METRICS_FILE, ROLLOUTS_DIR, read_metrics


def _mean(rows: list[dict], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
    return sum(vals) / len(vals) if vals else None


def _best(rows: list[dict], key: str, lower: bool = False) -> tuple[float, int] | None:
    vals = [(float(r[key]), int(r["step"])) for r in rows if isinstance(r.get(key), int | float)]
    if not vals:
        return None
    return (min if lower else max)(vals, key=lambda v: v[0])


def _change(rows: list[dict], key: str, fmt: str, k: int) -> str | None:
    first, last = _mean(rows[:k], key), _mean(rows[-k:], key)
    if first is None or last is None:
        return None
    return f"{fmt.format(first)} -> {fmt.format(last)}"


def _first_failure(workdir: pathlib.Path) -> str | None:
    """The first saved rollout the reward service could not score: "step S: reason: error" (None: none saved)."""
    for path in sorted((workdir / ROLLOUTS_DIR).glob("step_*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and row.get("reward_failure"):
                info = row.get("reward_info") if isinstance(row.get("reward_info"), dict) else {}
                return f"step {row.get('step')}: {row['reward_failure']}: {info.get('error', 'no error message')}"
    return None


def _failure_parts(rows: list[dict], workdir: pathlib.Path, k: int) -> list[str] | None:
    """When the reward service failed on some rollouts: their rate and the first error, and the malformed rate
    among the answers it did score (a failed rollout is neither malformed nor well-formed); None otherwise."""
    if not any(isinstance(r.get("reward_failure_rate"), int | float) and r["reward_failure_rate"] > 0 for r in rows):
        return None
    parts = [f"reward_failure_rate {_change(rows, 'reward_failure_rate', '{:.0%}', k)} (the reward failed: "
             f"first {_first_failure(workdir) or 'error not saved (logging.save_rollouts off)'})"]
    scored = [{"step": r["step"], "malformed": r["format_error_rate"] / (1 - r.get("reward_failure_rate", 0.0))}
              for r in rows if isinstance(r.get("format_error_rate"), int | float)
              and r.get("reward_failure_rate", 0.0) < 1]
    if scored:
        first, last = _mean(scored[:k], "malformed"), _mean(scored[-k:], "malformed")
        parts.append(f"malformed (of the scored answers) {first:.0%} -> {last:.0%}")
    else:
        parts.append("malformed n/a (no answer was scored)")
    return parts


def stage_summary(rows: list[dict], stage: str) -> dict[str, Any]:
    """First / last / best of a stage's main metrics; "first" and "last" average k = max(1, 10%) steps."""
    k = max(1, len(rows) // 10)
    out: dict[str, Any] = {"stage": stage, "steps": len(rows)}
    if not rows:
        return out
    out["last_step"] = int(rows[-1]["step"])
    key = "loss" if stage == "sft" else "reward_mean"
    for name, value in (("first", _mean(rows[:k], key)), ("last", _mean(rows[-k:], key))):
        if value is not None:
            out[f"{key}_{name}"] = value
    if (best := _best(rows, key, lower=stage == "sft")) is not None:
        out[f"{key}_best"], out["best_step"] = best
    for extra in ("format_error_rate", "reward_solved_frac", "reward_timeout_rate"):
        if (value := _mean(rows[-k:], extra)) is not None:
            out[f"{extra}_last"] = value
    if (step_s := _mean(rows, "time/step_s")) is not None:
        out["seconds_per_step"] = step_s
    # asynchronous runs (rl.max_staleness > 0): how stale the batches were and which side waited
    for extra in ("staleness_mean", "async/trainer_idle_frac", "async/producer_idle_frac"):
        if (value := _mean(rows, extra)) is not None:
            out[extra] = value
    if (worst := _best(rows, "staleness_max")) is not None:
        out["staleness_max"] = worst[0]
    return out


def summarize_run(workdir: str | os.PathLike) -> str:
    """Human-readable lines for the SFT stage (`workdir/sft`) and the GRPO stage (`workdir`) that have metrics."""
    workdir = pathlib.Path(workdir)
    lines = []
    for stage, path in (("sft", workdir / "sft" / METRICS_FILE), ("grpo", workdir / METRICS_FILE)):
        rows = read_metrics(path)
        if not rows:
            continue
        k = max(1, len(rows) // 10)
        s = stage_summary(rows, stage)
        parts = [f"{stage.upper():<5} {s['steps']} steps (to step {s['last_step']})"]
        if stage == "sft":
            if (c := _change(rows, "loss", "{:.3g}", k)) is not None:
                parts.append(f"loss {c} (best {s['loss_best']:.3g} at step {s['best_step']})")
        else:
            if (c := _change(rows, "reward_mean", "{:+.3f}", k)) is not None:
                parts.append(f"reward {c} (best {s['reward_mean_best']:+.3f} at step {s['best_step']})")
            # an agent run's rows carry agent/*: its rates are resolved episodes and failed tool calls; a
            # single-turn run's are malformed answers and exact fixes (what its reward measures)
            agent = any("agent/resolved_rate" in r for r in rows)
            failures = _failure_parts(rows, workdir, k)
            if failures is not None:  # named first: the rest of the line is about the fallback reward
                parts.extend(failures)
            named = ((("agent/resolved_rate", "resolved"), ("agent/tool_error_rate", "tool errors")) if agent
                     else (("format_error_rate", "malformed"), ("reward_solved_frac", "exact fixes")))
            if failures is not None:
                named = tuple(n for n in named if n[0] != "format_error_rate")
            for key, what in (*named, ("reward_timeout_rate", "reward timeouts")):
                if (c := _change(rows, key, "{:.0%}", k)) is not None:
                    parts.append(f"{what} {c}")
        if "seconds_per_step" in s:
            parts.append(f"{s['seconds_per_step']:.2f} s/step")
        if "staleness_mean" in s:
            parts.append(f"staleness {s['staleness_mean']:.2f} (max {s['staleness_max']:.0f})  idle: trainer "
                         f"{s['async/trainer_idle_frac']:.0%}, producer {s['async/producer_idle_frac']:.0%}")
        lines.append("  ".join(parts))
    if lines:
        lines.append("(first -> last: means over the first and last 10% of logged steps, at least one)")
    return "\n".join(lines) if lines else f"no metrics in {workdir}"
