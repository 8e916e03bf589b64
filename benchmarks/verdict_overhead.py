"""Grading time with and without the trusted pytest plugin (issue 56), side by side in one run.

    python benchmarks/verdict_overhead.py [--reps 3]

Grades the gold patches of the three SWE-bench Lite flask instances (clones from ../shared/data/repos, cached
environments) alternately with the plugin (today's harness) and without it (the harness before issue 56: pytest's
log only), after one warm-up grading of each, and prints each arm's median wall time per grading (whole grading,
and the test phase alone) and the ratio. CPU time comes from the kernel's child rusage (resource.getrusage): what
the host waits for (bwrap and the processes it reaps), not our clock.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import statistics
import tempfile
import time

from swerl_jax.tasks import environments, executors

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
FLASK = ("pallets__flask-4045", "pallets__flask-4992", "pallets__flask-5063")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    lite = {r["instance_id"]: r for r in json.loads((DATA / "swebench_lite.json").read_text())}
    out = pathlib.Path(tempfile.mkdtemp(prefix="verdict-bench-"))
    executor = executors.LocalExecutor(DATA / "repos", out, environments.EnvironmentCache())
    with_plugin = executors.runs_pytest
    times: dict[str, dict[str, list[float]]] = {arm: {"wall": [], "test": [], "cpu": []} for arm in ("plugin", "log")}
    for iid in FLASK:  # warm-up, not counted: the first grading of an instance fills the history-free checkout cache
        for arm in ("plugin", "log"):
            executors.runs_pytest = with_plugin if arm == "plugin" else (lambda spec: False)
            (out / f"{iid}-{arm}-warm").mkdir()
            executor.evaluate(lite[iid], lite[iid]["patch"], out / f"{iid}-{arm}-warm")
    for rep in range(args.reps):
        for iid in FLASK:
            for arm in (("plugin", "log") if rep % 2 == 0 else ("log", "plugin")):
                executors.runs_pytest = with_plugin if arm == "plugin" else (lambda spec: False)
                log = out / f"{iid}-{arm}-{rep}"
                log.mkdir()
                cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                result = executor.evaluate(lite[iid], lite[iid]["patch"], log)
                wall = time.perf_counter() - t0
                cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                assert result["status"] == "resolved", result
                assert (arm == "plugin") == ("plugin_verdict" in result), result
                times[arm]["wall"].append(wall)
                times[arm]["test"].append(result["environment"]["test_s"])
                times[arm]["cpu"].append(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime)
    executors.runs_pytest = with_plugin
    for key in ("wall", "test", "cpu"):
        a, b = statistics.median(times["plugin"][key]), statistics.median(times["log"][key])
        print(f"{key:5s} per grading (median of {len(times['log'][key])}): log only {b:.2f} s, with the plugin "
              f"{a:.2f} s, ratio {a / b:.3f}; all: log {[round(x, 2) for x in times['log'][key]]}, "
              f"plugin {[round(x, 2) for x in times['plugin'][key]]}")


if __name__ == "__main__":
    main()
