"""Calibrate the harness: grade gold and empty patches; exclude instances where gold fails or empty passes.

    python -m swerl_jax.eval.calibrate --instances FILE --repos DIR --out DIR [--repo owner/name]... (repeated)
        [--per-repo N] [--workers N] [--index-cutoff created_at|images|off] [--env-cache DIR] [--env-cache-gb G]

Runs the harness twice (OUT/gold, OUT/empty; each resumable) and writes OUT/calibration.json (per instance: gold
and empty status, included or the reason it is excluded) and OUT/calibration.md (a table per repository). An
instance whose gold patch fails only because its tests need the network (psf/requests) is excluded with that
reason: the sandbox has none.
"""

from __future__ import annotations

import argparse
import collections
import difflib
import json
import pathlib

from swerl_jax.cli import run_cli
from swerl_jax.eval import harness, predictions
from swerl_jax.tasks import reach
from swerl_jax.tasks.index_cutoff import MODES as CUTOFF_MODES

# Test-log signs that a test needed the network the sandbox does not give (results graded before reach.py).
NETWORK_SIGNS = reach.NETWORK_SIGNS


def exclusion_reason(gold: dict, empty: dict) -> str | None:
    """Why an instance cannot be scored (None when it can): gold must resolve and empty must not; an instance out
    of reach of this machine says what it lacks and the fix."""
    for result in (gold, empty):
        if result["status"] == reach.STATUS:
            return f"out of reach: {reach.line(result.get('reason', ''), result.get('fix', ''))}"
    if gold["status"] != "resolved":
        log = pathlib.Path(gold["log_dir"]) / "test.log"
        if log.exists() and NETWORK_SIGNS.search(log.read_text(errors="replace")):
            return f"gold {gold['status']}: its tests need the network (none in the sandbox)"
        detail = gold.get("error") or ", ".join(
            f"{k} {gold[k]['passed']}/{gold[k]['total']}" for k in ("FAIL_TO_PASS", "PASS_TO_PASS") if k in gold)
        return f"gold {gold['status']}" + (f" ({detail})" if detail else "")
    if empty["status"] == "resolved":
        return "the empty patch resolves it"
    return None


def select(instances: dict[str, dict], repos: list[str] | None, per_repo: int | None) -> list[str]:
    """Instance ids to calibrate: the given repositories (all when None), the first `per_repo` ids of each."""
    by_repo = collections.defaultdict(list)
    for iid in sorted(instances):
        by_repo[instances[iid]["repo"]].append(iid)
    if per_repo is not None and per_repo < 1:  # 0 read as "no limit" and calibrated every instance
        raise ValueError(f"--per-repo {per_repo}: must be >= 1 (leave it out for every instance)")
    for repo in repos or []:  # a typo calibrated nothing and exited 0
        if repo not in by_repo:
            close = difflib.get_close_matches(repo.replace("__", "/"), sorted(by_repo), n=1)
            raise KeyError(f"--repo {repo}: no instance of it in the instances file"
                           + (f"; did you mean {close[0]}?" if close else "") + " (owner/name, repeat --repo for more)")
    chosen = []
    for repo in sorted(by_repo):
        if repos is None or repo in repos:
            chosen += by_repo[repo][:per_repo] if per_repo else by_repo[repo]
    return chosen


def table(rows: list[dict]) -> str:
    """Markdown: per repository, instances, gold resolved, empty resolved, excluded; then the exclusions."""
    lines = ["| repository | instances | gold resolves | empty resolves | excluded | gold rate, network-free "
             "| out of reach |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for repo in sorted({r["repo"] for r in rows}):
        mine = [r for r in rows if r["repo"] == repo]
        gold = sum(r["gold_status"] == "resolved" for r in mine)
        empty = sum(r["empty_status"] == "resolved" for r in mine)
        excluded = sum(r["excluded"] is not None for r in mine)
        # The goal is stated over instances whose tests need no network (those can never pass in the sandbox).
        # Out of reach (a missing clone, interpreter, compiler, the network) is counted apart, not as a failure.
        far = [r for r in mine if (r["excluded"] or "").startswith("out of reach")]
        offline = [r for r in mine if "network" not in (r["excluded"] or "") and r not in far]
        gold_offline = sum(r["gold_status"] == "resolved" for r in offline)
        lines.append(f"| {repo} | {len(mine)} | {gold} | {empty} | {excluded} | "
                     f"{gold_offline}/{len(offline)} ({100 * gold_offline / max(1, len(offline)):.0f}%) | {len(far)} |")
    lines += ["", "| instance | gold | empty | excluded because |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['instance_id']} | {r['gold_status']} | {r['empty_status']} | {r['excluded'] or ''} |"
              for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the calibration CLI; returns the per-instance rows."""
    p = argparse.ArgumentParser(prog="python -m swerl_jax.eval.calibrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # all of it, as laid out
    # every path absolute once, here: the harness runs it grades and their reports name them
    p.add_argument("--instances", type=harness.typed_path, required=True)
    p.add_argument("--repos", type=harness.typed_path, required=True)
    p.add_argument("--out", type=harness.typed_path, required=True)
    p.add_argument("--repo", action="append", help="only these repositories (repeatable)")
    p.add_argument("--per-repo", type=int, default=None, help="at most N instances per repository")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--index-cutoff", choices=CUTOFF_MODES, default="created_at",
                   help="resolve unpinned requirements as of each instance's created_at, as of 2024-06-27 (images: "
                   "the official images' build day), or today (off)")
    p.add_argument("--env-cache", type=pathlib.Path, default=None, help="default $SWERL_JAX_HOME/eval/envs")
    p.add_argument("--env-cache-gb", type=harness.positive_gb, default=None, help="see the harness's --env-cache-gb")
    args = p.parse_args(argv)
    if not args.instances.is_file():
        raise FileNotFoundError(f"--instances {args.instances}: no such file")
    instances = predictions.index_instances(args.instances)
    ids = select(instances, args.repo, args.per_repo)
    args.out.mkdir(parents=True, exist_ok=True)
    reports = {}
    for kind in ("gold", "empty"):
        preds = args.out / f"{kind}.jsonl"
        preds.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": kind,
                                             "model_patch": instances[i]["patch"] if kind == "gold" else ""}) + "\n"
                                 for i in ids))
        reports[kind] = harness.main(["--instances", str(args.instances), "--predictions", str(preds), "--repos",
                                      str(args.repos), "--out", str(args.out / kind), "--workers", str(args.workers),
                                      "--timeout", str(args.timeout), "--index-cutoff", args.index_cutoff,
                                      *(["--env-cache", str(args.env_cache)] if args.env_cache else []),
                                      *(["--env-cache-gb", str(args.env_cache_gb)] if args.env_cache_gb else []),
                                      "--instance_ids", *ids]  # M counts these, not the whole instances file
                                     )["instances"]
    rows = []
    for iid in ids:
        gold, empty = reports["gold"][iid], reports["empty"][iid]
        rows.append({"instance_id": iid, "repo": instances[iid]["repo"], "gold_status": gold["status"],
                     "empty_status": empty["status"], "excluded": exclusion_reason(gold, empty),
                     # the index date its dependencies resolved at, and the env they came from (issue 49 item 1)
                     "index_cutoff": (gold.get("environment") or {}).get("index_cutoff"),
                     "env": (gold.get("environment") or {}).get("env")})
    (args.out / "calibration.json").write_text(json.dumps(rows, indent=1))
    (args.out / "calibration.md").write_text(table(rows))
    included = [r for r in rows if r["excluded"] is None]
    print(f"calibrated {len(rows)}: {len(included)} included, {len(rows) - len(included)} excluded "
          f"(table: {args.out / 'calibration.md'})")
    return rows


if __name__ == "__main__":
    run_cli("python -m swerl_jax.eval.calibrate", main, resume="run the same command again (finished instances "
            "are reused)")
