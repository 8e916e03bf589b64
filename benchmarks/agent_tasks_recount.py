"""Recount an agent run's reported rates from the rows it wrote (issue 58 item 7: "its reported rates add up
against the rows on disk"), and its throughput.

    python benchmarks/agent_tasks_recount.py --workdir WORKDIR [--tts TTS_OUT] [--json OUT.json]

- training: each metrics.jsonl step against rollouts/step_XXXXXX.jsonl (one row per episode): the episode count
  (rl.prompts_per_step x rl.num_samples of config.json), agent/resolved_rate, agent/tampered_rate,
  agent/log_only_resolved_rate, every agent/termination/<why>, agent/turns_mean and reward_mean;
- held-out evaluation: each step's eval/* against eval_rollouts/step_XXXXXX.jsonl (eval/episodes included);
- integrity of every row: the reward is 1 exactly when the plugin's verdict (`status`) is `resolved` (the run's
  agent.test_infra_unresolved can only lower it), and a `tampered` verdict never scores;
- test-time scaling (--tts): report.json's instances, K, pass@k and best@K against trajectories.jsonl and the
  per-instance choices.
Every mismatch is printed with where it is; the exit status is 1 when any is found. Throughput: episodes per hour
of step wall clock, and the grading seconds of an episode (its rows' reward_info.grade_s).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import numpy as np

TOL = 1e-6  # metrics.jsonl holds float32 means (reward_mean) and float64 rates


def read_jsonl(path: pathlib.Path) -> list[dict]:
    """The JSON objects of a JSONL file (a missing file is an error naming it)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (the rows to recount)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def episode_rates(rows: list[dict], prefix: str) -> dict[str, float]:
    """The rates an agent run reports for these episode rows, under `prefix` (agent/ or eval/), recounted."""
    n = max(1, len(rows))
    info = [r.get("reward_info") or {} for r in rows]
    out = {f"{prefix}resolved_rate": sum(r["reward"] >= 1.0 for r in rows) / n,
           f"{prefix}tampered_rate": sum(i.get("status") == "tampered" for i in info) / n,
           f"{prefix}log_only_resolved_rate": sum(bool(i.get("log_resolved")) and r["reward"] < 1.0
                                                  for r, i in zip(rows, info)) / n,
           f"{prefix}turns_mean": float(np.mean([i.get("turns", 0) for i in info] or [0]))}
    for why in ("finish", "max_turns", "timeout", "max_context", "disk", "env_error"):
        out[f"{prefix}termination/{why}"] = sum(r.get("termination") == why for r in rows) / n
    return out


def integrity(rows: list[dict], where: str) -> list[str]:
    """Rows whose reward disagrees with the plugin's verdict."""
    bad = []
    for r in rows:
        status = (r.get("reward_info") or {}).get("status")
        if r["reward"] >= 1.0 and status != "resolved":
            bad.append(f"{where}: {r['prompt_id']} sample {r['sample']}: reward {r['reward']} with verdict {status!r}")
        if status == "tampered" and r["reward"] > 0:
            bad.append(f"{where}: {r['prompt_id']} sample {r['sample']}: a tampered run scored {r['reward']}")
    return bad


def compare(reported: dict, recounted: dict, where: str) -> tuple[list[str], int]:
    """(mismatches, keys compared): every recounted key must be reported and equal within TOL."""
    bad = []
    for key, value in recounted.items():
        if key not in reported:
            bad.append(f"{where}: {key} is not in metrics.jsonl")
        elif not math.isclose(float(reported[key]), float(value), abs_tol=TOL):
            bad.append(f"{where}: {key} reported {reported[key]} but the rows give {value}")
    return bad, len(recounted)


def recount_run(workdir: pathlib.Path) -> dict:
    """Training and held-out rates of a run's metrics.jsonl recounted from its rows; throughput."""
    config = json.loads((workdir / "config.json").read_text())
    per_step = int(config["rl"]["prompts_per_step"]) * int(config["rl"]["num_samples"])
    metrics = read_jsonl(workdir / "metrics.jsonl")
    problems, compared, episodes, step_s, grade_s, evals, eval_episodes = [], 0, 0, 0.0, [], 0, 0
    for m in metrics:
        step = int(m["step"])
        rows = read_jsonl(workdir / "rollouts" / f"step_{step:06d}.jsonl")
        where = f"step {step}"
        if len(rows) != per_step:
            problems.append(f"{where}: {len(rows)} rollout rows, config.json says {per_step} episodes a step")
        recounted = episode_rates(rows, "agent/")
        recounted["reward_mean"] = float(np.mean([r["reward"] for r in rows]))
        bad, n = compare(m, recounted, where)
        problems += bad + integrity(rows, where)
        compared += n
        episodes += len(rows)
        step_s += float(m["time/step_s"]) - float(m.get("time/eval_s", 0.0))
        grade_s += [r["reward_info"]["grade_s"] for r in rows if "grade_s" in (r.get("reward_info") or {})]
        if "eval/episodes" in m:
            erows = read_jsonl(workdir / "eval_rollouts" / f"step_{step:06d}.jsonl")
            recounted = episode_rates(erows, "eval/") | {"eval/episodes": len(erows)}
            bad, n = compare(m, recounted, f"{where} eval")
            problems += bad + integrity(erows, f"{where} eval")
            compared += n
            evals += 1
            eval_episodes += len(erows)
            grade_s += [r["reward_info"]["grade_s"] for r in erows if "grade_s" in (r.get("reward_info") or {})]
    if not metrics:
        problems.append(f"{workdir / 'metrics.jsonl'}: no steps")
    return {"workdir": str(workdir), "steps": len(metrics), "episodes": episodes, "evaluations": evals,
            "eval_episodes": eval_episodes, "values_compared": compared, "problems": problems,
            "episodes_per_hour": 3600.0 * episodes / step_s if step_s > 0 else None,
            "grade_s_median": float(np.median(grade_s)) if grade_s else None, "graded": len(grade_s)}


def recount_tts(out: pathlib.Path) -> dict:
    """A test-time-scaling report (report.json) recounted from trajectories.jsonl."""
    from swerl_jax.eval.scaling import pass_at_k

    report = json.loads((out / "report.json").read_text())
    rows = read_jsonl(out / "trajectories.jsonl")
    by_id: dict[str, list[dict]] = {}
    for r in rows:
        by_id.setdefault(r["instance_id"], []).append(r)
    resolved = {i: [bool(t["resolved"]) for t in sorted(g, key=lambda t: t["sample"])] for i, g in by_id.items()}
    k = min(len(r) for r in resolved.values())
    recounted = {"instances": len(resolved), "K": k}
    recounted |= {f"pass@{j}": float(np.mean([pass_at_k(len(r), sum(r), j) for r in resolved.values()]))
                  for j in range(1, k + 1)}
    reported = {"instances": report["instances"], "K": report["K"]} | {f"pass@{j}": v
                                                                       for j, v in report["pass@k"].items()}
    problems, compared = compare(reported, recounted, "tts")
    for inst in report["per_instance"]:
        iid = inst["instance_id"]
        if inst["resolved"] != resolved.get(iid):
            problems.append(f"tts {iid}: report says resolved {inst['resolved']}, trajectories {resolved.get(iid)}")
    for name, value in report["best@K"].items():
        chosen = [(inst["chosen"][name], resolved[inst["instance_id"]]) for inst in report["per_instance"]]
        mine = float(np.mean([c is not None and r[c] for c, r in chosen]))
        compared += 1
        if not math.isclose(value, mine, abs_tol=TOL):
            problems.append(f"tts: best@K {name} reported {value} but the choices and trajectories give {mine}")
    return {"out": str(out), "evaluated": report.get("evaluated", {}).get("what"), "trajectories": len(rows),
            "values_compared": compared, "problems": problems, **recounted}


def main(argv: list[str] | None = None) -> int:
    """CLI: print the recount, exit 1 on any mismatch."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=pathlib.Path, help="an agent run's workdir (metrics.jsonl, rollouts/)")
    p.add_argument("--tts", type=pathlib.Path, help="a `python -m swerl_jax.eval.tts` --out folder")
    p.add_argument("--json", type=pathlib.Path, help="also write the recount here")
    args = p.parse_args(argv)
    if args.workdir is None and args.tts is None:
        p.error("give --workdir and/or --tts")
    result = {}
    if args.workdir is not None:
        result["run"] = recount_run(args.workdir)
    if args.tts is not None:
        result["tts"] = recount_tts(args.tts)
    for part in result.values():
        print(json.dumps({k: v for k, v in part.items() if k != "problems"}))
        for line in part["problems"]:
            print("MISMATCH " + line)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    problems = sum(len(part["problems"]) for part in result.values())
    print(f"{'ADDS UP' if not problems else f'{problems} MISMATCHES'}: "
          + ", ".join(f"{part['values_compared']} values of {name}" for name, part in result.items()))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
