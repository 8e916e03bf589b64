"""Curation recall against SWE-bench: which SWE-bench Lite / Verified PRs does curation find in a real clone?

    .venv/bin/python benchmarks/curate_recall.py --clones DIR [--extract]
    .venv/bin/python benchmarks/curate_recall.py pytest-dev/pytest=/path/to/clone.git [...] [--extract]

``--clones`` is curation's own clone folder (``owner__name`` or ``owner__name.git`` entries); ``OWNER/NAME=PATH``
names one clone directly (e.g. a bare mirror from the ``fetch`` tool). For every repository, the PR numbers of
its SWE-bench Lite and Verified instances (instance_id ``owner__name-NUMBER``) are looked up among the PR
candidates that curation's discovery (``GitRepo.pr_candidates``, what the pipeline's ListCandidates uses)
recovers from git history. Prints recall per repository with the missed numbers. With ``--extract`` every found
PR also goes through ``extract_pr`` (default ``CurateConfig``): how many become records, the drop reasons, and
how many records start from SWE-bench's own base commit.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.extract import extract_pr
from swerl_jax.curate.git_source import GitRepo, discover_clones, repo_name_from_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def swebench_instances(data_dir: str) -> dict[str, dict[int, dict]]:
    """repo -> PR number -> instance (Lite and Verified together, Lite's marked "lite": True; a PR in both counts
    once)."""
    out: dict[str, dict[int, dict]] = collections.defaultdict(dict)
    with open(os.path.join(data_dir, "swebench_lite.json")) as f:
        rows = [{**row, "lite": True} for row in json.load(f)]
    with open(os.path.join(data_dir, "swebench_verified.jsonl")) as f:
        rows += [json.loads(line) for line in f if line.strip()]
    for row in rows:
        number = int(row["instance_id"].rsplit("-", 1)[1])
        out[row["repo"]].setdefault(number, row)
    return out


def clone_paths(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(owner/name, path) of every clone named on the command line."""
    pairs = []
    if args.clones:
        for name, path in discover_clones(args.clones):
            repo = repo_name_from_dir(name)
            if repo is None:
                sys.exit(f"--clones: {name!r} is not named owner__name")
            pairs.append((repo, path))
    for spec in args.clone:
        repo, sep, path = spec.partition("=")
        if not sep or "/" not in repo or not os.path.isdir(path):
            sys.exit(f"expected OWNER/NAME=PATH with an existing PATH, got {spec!r}")
        pairs.append((repo, path))
    if not pairs:
        sys.exit("name clones with --clones DIR or OWNER/NAME=PATH")
    return pairs


def measure(repo: str, path: str, wanted: dict[int, dict], extract: bool) -> dict:
    """Recall (and, with ``extract``, record outcomes) of one clone."""
    git = GitRepo(path)
    try:
        start = time.perf_counter()
        cands = {pr["number"]: pr for pr in git.pr_candidates()}
        seconds = time.perf_counter() - start
        found = sorted(n for n in wanted if n in cands)
        lite = [n for n in wanted if wanted[n].get("lite")]
        row = {"repo": repo, "candidates": len(cands), "wanted": len(wanted), "found": len(found),
               "lite": len(lite), "lite_found": sum(n in cands for n in lite),
               "missed": sorted(set(wanted) - set(found)), "seconds": round(seconds, 1)}
        if extract:
            reasons: collections.Counter = collections.Counter()
            same_base = 0
            for n in found:
                reason, record, _ = extract_pr(git, repo, cands[n], {}, CurateConfig())
                reasons[reason or "kept"] += 1
                same_base += record is not None and record["base_commit"] == wanted[n]["base_commit"]
            row.update(outcomes=dict(reasons), same_base=same_base)
        return row
    finally:
        git.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clone", nargs="*", help="OWNER/NAME=PATH of a clone")
    ap.add_argument("--clones", default="", help="a curation clone folder (owner__name[.git] entries)")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"),
                    help="folder with swebench_lite.json and swebench_verified.jsonl")
    ap.add_argument("--extract", action="store_true", help="also extract the found PRs into records")
    args = ap.parse_args()
    instances = swebench_instances(args.data)
    total_wanted = total_found = 0
    for repo, path in clone_paths(args):
        wanted = instances.get(repo, {})
        if not wanted:
            print(f"{repo}: no SWE-bench Lite/Verified instances, skipped")
            continue
        row = measure(repo, path, wanted, args.extract)
        total_wanted, total_found = total_wanted + row["wanted"], total_found + row["found"]
        line = (f"{repo}: recall {row['found']}/{row['wanted']} = {row['found'] / row['wanted']:.1%} "
                f"(Lite {row['lite_found']}/{row['lite']}; {row['candidates']} candidates, {row['seconds']} s) "
                f"missed {row['missed']}")
        if args.extract:
            line += f"; records of found PRs {row['outcomes']}, SWE-bench base commit {row['same_base']}"
        print(line, flush=True)
    if total_wanted:
        print(f"all: recall {total_found}/{total_wanted} = {total_found / total_wanted:.1%}")


if __name__ == "__main__":
    main()
