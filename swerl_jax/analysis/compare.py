"""Several runs side by side: the same metric overlaid, and one summary row per run (ablations, seeds).

    runs = load_runs("workdirs/swerl-tiny,workdirs/discrete-tiny")   # or a list of paths
    plots.curves(overlay(runs, "reward_mean"), ...)
    to_markdown(compare_table(runs))
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence

from swerl_jax.analysis.runs import Run, load_run
from swerl_jax.runs.rundir import OPERATIONAL_KEYS, flatten
from swerl_jax.runs.summary import stage_summary

# Config fields shown beside each run in the table: what an ablation usually changes.
CONFIG_COLUMNS = ("rl.advantage", "rl.loss_agg", "rl.kl_coef", "reward.kind", "optim.learning_rate", "seed")


def _names(paths: Sequence[pathlib.Path]) -> list[str]:
    # the shortest path tails that tell the runs apart
    for depth in range(1, max(len(p.parts) for p in paths) + 1):
        names = ["/".join(p.parts[-depth:]) for p in paths]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def load_runs(workdirs: str | Sequence[str | os.PathLike]) -> dict[str, Run]:
    """Runs by a short unique name (the workdirs' last path parts); `workdirs` is a list or a comma-separated
    string. Errors name the workdir (see `load_run`)."""
    if isinstance(workdirs, str):
        workdirs = [w.strip() for w in workdirs.split(",") if w.strip()]
    paths = [pathlib.Path(w).resolve() for w in workdirs]
    if not paths:
        raise ValueError("no workdirs given to compare")
    if len(set(paths)) != len(paths):
        raise ValueError(f"the same workdir is given twice: {[str(p) for p in paths]}")
    return {name: load_run(path) for name, path in zip(_names(paths), paths)}


def overlay(runs: Mapping[str, Run], key: str, *aliases: str) -> dict[str, tuple[list[int], list[float]]]:
    """{run name: (steps, values)} of one metric, for `plots.curves`; runs that never logged it are left out."""
    out = {}
    for name, run in runs.items():
        xs, ys = run.metric(key, *aliases)
        if xs:
            out[name] = (xs, ys)
    return out


def _config_value(config: dict | None, dotted: str) -> object:
    node: object = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def differing_keys(runs: Mapping[str, Run]) -> list[str]:
    """The config keys (dotted, sorted) whose values are not the same in every run that has a config.json: what
    the compared runs changed. Keys that change nothing computed (`rundir.OPERATIONAL_KEYS`) are left out."""
    configs = [flatten(run.config) for run in runs.values() if isinstance(run.config, dict)]
    if len(configs) < 2:
        return []
    keys = set().union(*configs)
    return sorted(k for k in keys if not (k.startswith(OPERATIONAL_KEYS) or k in OPERATIONAL_KEYS)
                  and len({repr(c.get(k)) for c in configs}) > 1)


def compare_table(runs: Mapping[str, Run], config_columns: Sequence[str] = CONFIG_COLUMNS) -> list[dict]:
    """One row per run: `config_columns` and every other config key that differs between the runs
    (`differing_keys`), steps, reward first / last / best (means over the first / last 10% of steps, as the run's
    closing summary), last malformed and exact-fix rates, s/step."""
    columns = list(config_columns) + [k for k in differing_keys(runs) if k not in config_columns]
    rows = []
    for name, run in runs.items():
        s = stage_summary(run.metrics, "grpo")
        row: dict = {"run": name}
        row.update({col: _config_value(run.config, col) for col in columns})
        row.update({"steps": s["steps"], "reward first": s.get("reward_mean_first"),
                    "reward last": s.get("reward_mean_last"), "reward best": s.get("reward_mean_best"),
                    "malformed last": s.get("format_error_rate_last"),
                    "exact last": s.get("reward_solved_frac_last"), "s/step": s.get("seconds_per_step")})
        rows.append(row)
    return rows
