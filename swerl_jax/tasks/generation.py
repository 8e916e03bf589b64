"""A generation run of executable tasks: one repository's mutation candidates validated in the sandbox
(`generate`), PR records reverted and validated (`revert`), and everything decided under an output folder collected
into instances, the by-file split, the contamination report and the summary table. `python -m swerl_jax.tasks`
is its command line.

Each repository's decided candidates go to OUT/<owner__name>/results.jsonl (re-running resumes: decided keys are
skipped, infrastructure failures retried); its task commits to OUT/repos/<owner__name>.git (the harness's and an
agent's --repos). After each run the whole of OUT is collected again: OUT/instances.jsonl (every kept task),
train.jsonl / heldout.jsonl (split by file), contamination.json (against SWE-bench Lite/Verified) and summary.json
(the table by repository and mutation kind, candidates per kept task, seconds per decided task).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import subprocess
import time

from swerl_jax.data.records import read_records
from swerl_jax.sandbox.bwrap import SandboxLimits
from swerl_jax.tasks import infer_spec, mutations, output, reverted, sources, validate
from swerl_jax.tasks.environments import EnvironmentCache, resolve_clone
from swerl_jax.tasks.executors import LocalExecutor
from swerl_jax.tasks.specs import commit_time

DEFAULT_BENCHMARKS = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data"


def repo_name(source: pathlib.Path, given: str | None) -> str:
    """owner/name: --name, else from a fetched mirror's folder (owner+name/repo) or a bundle (owner__name.bundle)."""
    if given:
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", given):
            raise ValueError(f"--name {given!r}: must be owner/name")
        return given
    for part in (source.name, source.parent.name):
        for sep in ("+", "__"):
            stem = part.removesuffix(".bundle").removesuffix(".git")
            if sep in stem:
                return stem.replace(sep, "/", 1)
    raise ValueError(f"--repo {source}: cannot tell owner/name from the path: pass --name owner/name")


def make_executor(args: argparse.Namespace, repos: pathlib.Path) -> LocalExecutor:
    """The harness's own executor with plugin verdicts and the dated index as of each instance's date."""
    limits = SandboxLimits(memory_bytes=int(args.memory_gb * (1 << 30)), timeout_s=args.timeout,
                           cpu_seconds=int(args.timeout) + 60)
    return LocalExecutor(repos, args.out / "runs", EnvironmentCache(args.env_cache), limits, setup_timeout_s=900,
                         index_cutoff="created_at", verdict="plugin")


def repo_spec(git_dir: pathlib.Path, commit: str, created_at: str, overrides_json: str) -> dict:
    """The spec inferred from the packaging files at `commit`, with the user's JSON overrides."""
    packaging = {}
    for name in ("pyproject.toml", "setup.cfg", "setup.py", "tox.ini", *infer_spec.REQ_FILES):
        try:
            packaging[name] = sources.git(git_dir, "show", f"{commit}:{name}")
        except subprocess.CalledProcessError:
            continue
    try:
        overrides = json.loads(overrides_json)
    except json.JSONDecodeError as err:
        raise ValueError(f"--spec: not JSON: {err}") from None
    return infer_spec.infer_spec(packaging, created_at, overrides)


def revert(args: argparse.Namespace) -> dict:
    """Validate a reverted-PR task per record into OUT/<owner__name>/reverted.jsonl (resumable: a record whose
    key, its patches and the executor's fingerprint, is there is skipped; infrastructure failures are retried)."""
    executor, counts = make_executor(args, args.repos), {"kept": 0, "dropped": 0, "infra": 0, "skipped": 0}
    for record in read_records(args.records):
        git_dir = resolve_clone(args.repos, record["repo"], args.out / "repos")
        spec = repo_spec(git_dir, record["base_commit"], record["created_at"], args.spec)
        instance = reverted.pr_instance(record, spec)
        key = hashlib.sha256(json.dumps([instance["instance_id"], instance["patch"], instance["test_patch"],
                                         reverted.test_files(record["test_patch"]), executor.fingerprint(instance)],
                                        default=str).encode()).hexdigest()[:16]
        path = args.out / record["repo"].replace("/", "__") / "reverted.jsonl"
        done = {json.loads(x)["key"] for x in path.read_text().splitlines() if x.strip()} if path.exists() else set()
        if key in done:
            counts["skipped"] += 1
            continue
        try:
            row = reverted.validate_pr(record, spec, executor, args.out / "revert-logs" / instance["instance_id"])
        except validate.InfraError as err:
            counts["infra"] += 1
            print(f"{instance['instance_id']}: infrastructure failure, not stored: {err}")
            continue
        counts["kept" if row["kept"] else "dropped"] += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as out:
            out.write(json.dumps({"key": key, **row}) + "\n")
    return counts


def prepare(args: argparse.Namespace) -> tuple[validate.Validator, list[mutations.Mutation]]:
    """The validator and the ordered candidates of one repository at one commit."""
    repo = repo_name(args.repo, args.name)
    git_dir = sources.task_repo(args.repo, args.out / "repos", repo)
    snapshot = sources.Snapshot.read(git_dir, args.commit)
    created_at = commit_time(str(git_dir), snapshot.commit)
    spec = repo_spec(git_dir, snapshot.commit, created_at, args.spec)
    found = []
    for path in snapshot.source_files():
        tests = snapshot.tests_for(path)
        if tests:
            mentioned = sources.words([snapshot.files[t] for t in tests])
            found += mutations.file_mutations(path, snapshot.files[path], mentioned.__contains__, check=False)
    ordered = mutations.candidates(found, args.seed, args.pairs)
    if args.max_candidates is not None:
        ordered = ordered[:args.max_candidates]
    executor = make_executor(args, args.out / "repos")
    target = validate.Target(repo, git_dir, snapshot.commit, created_at, spec, snapshot)
    return validate.Validator(target, executor, args.out / repo.replace("/", "__")), ordered


def collect(out: pathlib.Path, benchmarks: pathlib.Path, heldout_fraction: float, seed: int) -> dict:
    """Gather every repository's results under `out` into the instance files, the split, the report and the
    summary; returns the summary."""
    latest: dict = {}
    for results in sorted([*out.glob("*/results.jsonl"), *out.glob("*/reverted.jsonl")]):
        for line in results.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                # a candidate decided again under another key (a changed spec or executor): its latest decision
                latest[row.get("instance_id") or (row["repo"], row["commit"], row["mutation"]["key"])] = row
    rows = list(latest.values())
    kept = [r["instance"] for r in rows if r["kept"]]
    train, heldout = output.split_by_file(kept, heldout_fraction, seed)
    for name, items in (("instances", kept), ("train", train), ("heldout", heldout)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    report = output.contamination(kept, output.load_benchmarks(benchmarks))
    (out / "contamination.json").write_text(json.dumps(report, indent=1))
    seconds = [r["seconds"] for r in rows if "seconds" in r]
    summary = {"decided": len(rows), "kept": len(kept), "train": len(train), "heldout": len(heldout),
               "candidates_per_kept": round(len(rows) / len(kept), 2) if kept else None,
               "seconds_per_decided": round(sum(seconds) / len(seconds), 1) if seconds else None,
               "table": output.table(rows), "contamination_files": {k: len(v["files"]) for k, v in report.items()
                                                                    if k != "generated"}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "table.md").write_text(output.markdown_table(summary["table"]) + "\n")
    return summary


def run(args: argparse.Namespace) -> dict:
    """Run `generate` or `revert` (parsed by `python -m swerl_jax.tasks`); returns the collected summary."""
    if args.command == "revert":
        counts = revert(args)
        print(json.dumps(counts))
        return collect(args.out, DEFAULT_BENCHMARKS, 0.2, 0)
    if args.workers < 1:
        raise SystemExit(f"--workers {args.workers}: must be at least 1")
    started = time.monotonic()
    validator, ordered = prepare(args)
    print(f"{validator.target.repo}@{validator.target.commit[:12]}: {len(ordered)} candidates; spec "
          f"{json.dumps({k: validator.target.spec[k] for k in ('python', 'install', 'test_cmd')})}")
    counts = validator.run(ordered, args.workers, args.limit, progress=not args.no_progress)
    summary = collect(args.out, args.benchmarks, args.heldout_fraction, args.seed)
    elapsed = time.monotonic() - started
    print(json.dumps({"repo": validator.target.repo, **counts, "wall_s": round(elapsed, 1),
                      "total_kept": summary["kept"]}))
    return summary
