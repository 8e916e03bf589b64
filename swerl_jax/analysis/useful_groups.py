"""What a GRPO group that carries a gradient costs: wall time and samples per useful group, per run of a sweep.

A group whose rewards are all equal gives GRPO no gradient (its advantages are 0), yet its samples were generated
and scored. Dynamic sampling (`rl.dynamic_sampling`, DAPO) drops such groups and draws more prompts, so a step
costs more and every trained group is useful; without it a step is cheaper and some trained groups are wasted. The
fair comparison is the cost per useful group:

    useful groups   = sum over steps of (rl.prompts_per_step - zero_variance_groups)
    wall / useful   = sum(time/step_s) / useful groups
    samples / useful = sum(prompts drawn) x rl.num_samples / useful groups

The groups without a signal are `no_signal_groups` (every advantage 0, the estimator's own verdict) where every
step logged it, else `zero_variance_groups` (every reward equal: the same unless the baseline leaves samples out,
env errors or filtered truncations); with dynamic sampling they are the groups it had to fill after
`rl.dynamic_sampling_max_draws` draws. Prompts drawn is `dynamic/prompts_drawn` when logged, else
rl.prompts_per_step. Samples per useful group does not depend on the machine's load; wall time does. A run of
several processes with dynamic sampling is refused: each process draws for its own prompts and logs its own
count, while the groups are counted over all of them.

    python -m swerl_jax.analysis.useful_groups SWEEP_DIR [--pair A B]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
from collections.abc import Mapping, Sequence

from swerl_jax.analysis.ablations import load_sweep, paired_difference, t_interval, variant_name, varying_keys


def run_cost(rows: Sequence[Mapping], prompts_per_step: int, num_samples: int, processes: int = 1
             ) -> dict[str, float]:
    """The cost of one run's GRPO steps (`rows`: its metrics.jsonl rows; rows without `reward_mean`, such as an
    SFT evaluation row, are not steps; `processes`: its mesh.num_processes). ValueError naming the step when a
    step lacks `time/step_s` or `zero_variance_groups`, or naming the cause for a multi-process dynamic run."""
    steps = [r for r in rows if "reward_mean" in r]
    if not steps:
        raise ValueError("no GRPO step logged (no row with reward_mean)")
    for r in steps:
        for key in ("time/step_s", "zero_variance_groups"):
            if key not in r:
                raise ValueError(f"step {r.get('step')}: {key!r} not logged")
    if processes > 1 and any("dynamic/prompts_drawn" in r for r in steps):
        raise ValueError(f"a run of {processes} processes with dynamic sampling: dynamic/prompts_drawn is the "
                         "logging process's own draws, the groups are every process's")
    no_signal = "no_signal_groups" if all("no_signal_groups" in r for r in steps) else "zero_variance_groups"
    wall = sum(float(r["time/step_s"]) for r in steps)
    wasted = sum(int(r[no_signal]) for r in steps)
    drawn = sum(int(r.get("dynamic/prompts_drawn", prompts_per_step)) for r in steps)
    useful = len(steps) * prompts_per_step - wasted
    per = (lambda x: x / useful) if useful > 0 else (lambda x: math.inf)
    return {"steps": len(steps), "wall_s": wall, "useful_groups": useful, "wasted_groups": wasted,
            "prompts_drawn": drawn, "wall_s_per_useful_group": per(wall),
            "samples_per_useful_group": per(drawn * num_samples)}


def sweep_costs(index: Mapping) -> dict[str, dict[int, dict[str, float]]]:
    """{variant: {seed: run_cost}} over the finished runs of a loaded sweep (`load_sweep`), each with its
    config's rl.prompts_per_step, rl.num_samples and mesh.num_processes (from the run's config.json)."""
    varying = varying_keys(index)
    out: dict[str, dict[int, dict[str, float]]] = {}
    for run in index["runs"]:
        if run.get("status") != "done":
            continue
        config = json.loads((pathlib.Path(run["workdir"]) / "config.json").read_text())
        cost = run_cost(run["rows"], int(config["rl"]["prompts_per_step"]), int(config["rl"]["num_samples"]),
                        int(config.get("mesh", {}).get("num_processes", 1)))
        out.setdefault(variant_name(run, varying), {})[int(run["seed"])] = cost
    return out


MEASURES = ("wall_s_per_useful_group", "samples_per_useful_group", "wasted_groups", "wall_s")


def main(argv: Sequence[str] | None = None) -> int:
    """Print each variant's cost per useful group (mean [95% t-interval] over seeds), each run's, and the paired
    differences asked for."""
    p = argparse.ArgumentParser(prog="python -m swerl_jax.analysis.useful_groups", description=main.__doc__)
    p.add_argument("sweep_dir", help="a directory of python -m swerl_jax.sweep (its index.json)")
    p.add_argument("--pair", action="append", nargs=2, default=[], metavar=("A", "B"),
                   help="variants to compare, A - B paired by seed (repeatable)")
    args = p.parse_args(argv)
    root = pathlib.Path(args.sweep_dir)
    if not (root / "index.json").is_file():
        print(f"useful_groups: {root} has no index.json (not a sweep directory)", file=sys.stderr)
        return 2
    costs = sweep_costs(load_sweep(root))
    print(f"sweep {root.resolve()}")
    print("| variant | seeds | " + " | ".join(MEASURES) + " |")
    print("| --- | --- |" + " --- |" * len(MEASURES))
    for variant, by_seed in costs.items():
        cells = [t_interval([c[m] for c in by_seed.values()]).text(digits=4) for m in MEASURES]
        print(f"| {variant} | {len(by_seed)} | " + " | ".join(cells) + " |")
    print("\n| variant | seed | steps | useful | wasted | prompts drawn | wall s | s / useful | samples / useful |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for variant, by_seed in costs.items():
        for seed, c in sorted(by_seed.items()):
            print(f"| {variant} | {seed} | {c['steps']} | {c['useful_groups']} | {c['wasted_groups']} | "
                  f"{c['prompts_drawn']} | {c['wall_s']:.1f} | {c['wall_s_per_useful_group']:.2f} | "
                  f"{c['samples_per_useful_group']:.2f} |")
    for a, b in args.pair:
        for name in (a, b):
            if name not in costs:
                print(f"useful_groups: --pair {name!r} is not a variant of this sweep ({', '.join(costs)})",
                      file=sys.stderr)
                return 2
        for m in MEASURES[:2]:
            interval, pvalue = paired_difference({s: c[m] for s, c in costs[a].items()},
                                                 {s: c[m] for s, c in costs[b].items()})
            print(f"{a} - {b}: {m} {interval.text(digits=4)} (p {pvalue:.2g}, {interval.n} seeds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
