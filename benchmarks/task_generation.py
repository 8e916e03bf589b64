"""Measure a task-generation run (`python -m swerl_jax.tasks generate ... --out OUT`) and re-grade a seeded sample
of its tasks through the harness.

    python benchmarks/task_generation.py --out OUT [--sample N --env-cache FRESH_DIR]

Prints, per repository: candidates decided, tasks kept, candidates per kept task, the validation seconds summed
over decided candidates (the pipeline's wall time less the env build and candidate generation), tasks validated per
hour of that time, and the gold and empty gradings' mean seconds; then the table by repository and mutation kind.
With --sample, N kept tasks (seed 0) are graded by `python -m swerl_jax.eval.harness` from a fresh environment
cache twice: with their gold patches (all must resolve) and with the empty patch (none may). The harness does run an
empty prediction (the executor applies nothing and runs the tests); it files it under the outcome "empty_patch"
whatever the tests said, so the empty run is judged here by each result's `status` (the tests' verdict) and its
FAIL_TO_PASS count: "ran" counts the empty runs whose tests started, "f2p_failing" those where a FAIL_TO_PASS test
failed. Grading seconds per task come from each result's `environment` (`install_s` + `test_s`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import time

from swerl_jax.eval import harness
from swerl_jax.tasks import output


def measure(out: pathlib.Path) -> dict:
    """Per-repository numbers from OUT/*/results.jsonl."""
    report = {}
    rows_all = []
    for path in sorted(out.glob("*/results.jsonl")):
        # a candidate decided again under another key (a changed spec, timeout or executor): its latest decision
        # counts, as `generation.collect` has it
        latest = {}
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                latest[(row["repo"], row["commit"], row["mutation"]["key"])] = row
        rows = list(latest.values())
        rows_all += rows
        kept = [r for r in rows if r["kept"]]
        seconds = sum(r.get("seconds", 0) for r in rows)
        gold = [r["checks"]["gold_s"] for r in kept if "gold_s" in r.get("checks", {})]
        report[rows[0]["repo"]] = {
            "decided": len(rows), "kept": len(kept),
            "candidates_per_kept": round(len(rows) / len(kept), 2) if kept else None,
            "validation_s": round(seconds), "kept_per_hour": round(3600 * len(kept) / seconds, 1) if seconds else None,
            "mean_s_kept": round(statistics.mean(r["seconds"] for r in kept), 1) if kept else None,
            "mean_s_dropped": round(statistics.mean(r["seconds"] for r in rows if not r["kept"] and "seconds" in r), 1)
            if any(not r["kept"] and "seconds" in r for r in rows) else None,
            "gold_grading_s": round(statistics.mean(gold), 1) if gold else None,
            "drop_reasons": sorted({r["reason"] for r in rows if not r["kept"]}),
        }
    return {"repositories": report, "table": output.markdown_table(output.table(rows_all))}


def _slowest_env(envs: list[dict]) -> dict[str, float]:
    """{env: its longest `env_s`}: the grading that built an environment reports the build, the others ~0 s."""
    slowest: dict[str, float] = {}
    for e in envs:
        if "env_s" in e:
            slowest[e["env"]] = max(slowest.get(e["env"], 0.0), e["env_s"])
    return slowest


def _grade(run: pathlib.Path, name: str, sample: list[dict], patches: list[str], out: pathlib.Path,
           env_cache: pathlib.Path, workers: int) -> dict:
    """Grade `sample` with `patches` through the harness CLI into run/name: the report's counts, per-result
    statuses and grading seconds."""
    predictions = run / f"{name}.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": i["instance_id"], "model_name_or_path": name,
                                               "model_patch": p}) + "\n" for i, p in zip(sample, patches)))
    started = time.monotonic()
    report = harness.main(["--instances", str(run / "instances.jsonl"), "--predictions", str(predictions),
                           "--repos", str(out / "repos"), "--out", str(run / name), "--verdict", "plugin",
                           "--env-cache", str(env_cache), "--no-progress", "--timeout", "300",
                           "--workers", str(workers)])
    results = [json.loads((run / name / "results" / f"{i['instance_id']}.json").read_text()) for i in sample]
    envs = [r.get("environment") or {} for r in results]
    grading = [e["install_s"] + e["test_s"] for e in envs if "install_s" in e and "test_s" in e]
    return {"resolved": sum(r["status"] == "resolved" for r in results),
            "status_counts": report["status_counts"], "outcome_counts": report["outcome_counts"],
            "ran": sum(bool(r.get("tests_ran")) for r in results),
            "f2p_failing": sum(bool((r.get("FAIL_TO_PASS") or {}).get("failed")) for r in results),
            "env_builds_s": sorted(_slowest_env(envs).values()),
            "grading_s_mean": round(statistics.mean(grading), 2) if grading else None,
            "grading_s_median": round(statistics.median(grading), 2) if grading else None,
            "wall_s": round(time.monotonic() - started, 1)}


def harness_sample(out: pathlib.Path, n: int, env_cache: pathlib.Path, workers: int = 2) -> dict:
    """Grade a seeded sample of n kept tasks through the harness CLI from a fresh env cache: with their gold patches
    (each must resolve) and with the empty patch (none may)."""
    instances = [json.loads(x) for x in (out / "instances.jsonl").read_text().splitlines() if x.strip()]
    sample = random.Random(0).sample(instances, min(n, len(instances)))
    run = out / f"harness-sample-{n}"
    run.mkdir(exist_ok=True)
    (run / "instances.jsonl").write_text("".join(json.dumps(i) + "\n" for i in sample))
    by_repo: dict[str, int] = {}
    for i in sample:
        by_repo[i["repo"]] = by_repo.get(i["repo"], 0) + 1
    return {"sampled": len(sample), "by_repository": dict(sorted(by_repo.items())), "env_cache": str(env_cache),
            "gold": _grade(run, "gold", sample, [i["patch"] for i in sample], out, env_cache, workers),
            "empty": _grade(run, "empty", sample, [""] * len(sample), out, env_cache, workers)}


def main() -> None:
    """Print the measurements (and the harness sample's) as JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--env-cache", type=pathlib.Path, default=None, help="a fresh folder: environments rebuilt")
    p.add_argument("--workers", type=int, default=2, help="the harness's gradings at a time")
    args = p.parse_args()
    if not (args.out / "instances.jsonl").is_file():
        raise SystemExit(f"{args.out}/instances.jsonl does not exist: run python -m swerl_jax.tasks generate first")
    found = measure(args.out)
    print(json.dumps(found["repositories"], indent=1))
    print(found["table"])
    if args.sample:
        if args.env_cache is None:
            raise SystemExit("--sample needs --env-cache (a fresh folder, so environments are rebuilt)")
        print(json.dumps(harness_sample(args.out, args.sample, args.env_cache, args.workers), indent=1))


if __name__ == "__main__":
    main()
