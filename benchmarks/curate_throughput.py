"""Curation throughput: PRs/s of our extraction vs GitPython on the same PRs, and the Beam pipeline with 1 and 2
FnApiRunner workers (the local runner `run_curation` names).

    .venv/bin/python benchmarks/curate_throughput.py --clones /tmp/curate_real/clones [--workers 1 2]

Part 1 (extraction core, one process): the same merged-PR list (git history, bot PRs removed for both) is
turned into (path, before, after) triples by our ``extract_pr`` (one ``git cat-file --batch`` per repo,
``git diff --raw``) and by GitPython (``Commit.diff(create_patch=True)`` + ``blob.data_stream``, the engine
behind PyDriller); prints both rates, the ratio, and how many PRs' file contents agree.
Part 2 (end to end): ``run_curation`` on the local FnApiRunner, multi-process, per worker count: PR candidates/s.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.extract import extract_pr
from swerl_jax.curate.filters import is_bot
from swerl_jax.curate.git_source import GitRepo, discover_clones, repo_name_from_dir


def candidates(clones: str) -> list[tuple[str, str, dict]]:
    """(repo, path, pr) for every non-bot PR recovered from git history."""
    out = []
    for name, path in discover_clones(clones):
        repo = repo_name_from_dir(name)
        g = GitRepo(path)
        for pr in g.pr_candidates():
            if not is_bot([pr["title"], pr["body"], pr["user"], pr["branch"]]):
                out.append((repo, path, pr))
        g.close()
    return out


def ours(cands, config) -> tuple[float, dict]:
    """Our extraction; returns seconds and instance -> {path: (before, after)} for kept PRs."""
    repos, result = {}, {}
    start = time.perf_counter()
    for repo, path, pr in cands:
        g = repos.setdefault(path, GitRepo(path))
        reason, record, _ = extract_pr(g, repo, pr, {}, config)
        if record is not None:
            result[(repo, pr["number"])] = {
                p: (record["code_context"].get(p, ""), new) for p, new in record["oracle_new_content"].items()}
    seconds = time.perf_counter() - start
    for g in repos.values():
        g.close()
    return seconds, result


def gitpython(cands) -> tuple[float, dict]:
    """The peer: GitPython diff with renames and blob reads for the same (base, head) rule."""
    # The fetched mirrors belong to another user; our GitRepo passes -c safe.directory=*, GitPython needs this.
    os.environ.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="safe.directory", GIT_CONFIG_VALUE_0="*")
    import git

    repos, result = {}, {}
    start = time.perf_counter()
    for repo, path, pr in cands:
        if path not in repos:
            # Mirrors without a config file look non-bare to GitPython; GIT_DIR pins the repository for the
            # git processes this Repo starts (candidates come grouped by repository).
            os.environ["GIT_DIR"] = path
            repos[path] = git.Repo(path)
        r = repos[path]
        merge = r.commit(pr["merge_commit"])
        if len(merge.parents) >= 2:
            base, head = r.merge_base(merge.parents[0], merge.parents[1])[0], merge.parents[1]
        else:
            base, head = merge.parents[0], merge
        files = {}
        try:
            for d in base.diff(head, create_patch=True, M=True):
                before = d.a_blob.data_stream.read().decode("utf-8") if d.a_blob and not d.new_file else ""
                after = d.b_blob.data_stream.read().decode("utf-8") if d.b_blob and not d.deleted_file else ""
                if not d.deleted_file:
                    files[d.b_path] = (before if not d.renamed_file else "", after)
                if d.deleted_file or d.renamed_file:
                    files[d.a_path] = (before, "")
        except (UnicodeDecodeError, ValueError):
            continue
        result[(repo, pr["number"])] = files
    seconds = time.perf_counter() - start
    for r in repos.values():
        r.close()
    os.environ.pop("GIT_DIR", None)
    return seconds, result


def main() -> int:
    """Run both parts and print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--clones", required=True)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    args = ap.parse_args()
    config = CurateConfig(relevant_predictor="none", drop_benchmark_instances=False)
    cands = candidates(args.clones)
    print(f"machine: {os.cpu_count()} cores; {len(cands)} non-bot merged PRs from git history")

    t_ours, r_ours = ours(cands, config)
    t_peer, r_peer = gitpython(cands)
    agree = sum(1 for k, files in r_ours.items() if r_peer.get(k) == files)
    print(f"extraction, ours (cat-file --batch): {len(cands) / t_ours:8.1f} PRs/s ({t_ours:.1f} s)")
    print(f"extraction, GitPython peer:          {len(cands) / t_peer:8.1f} PRs/s ({t_peer:.1f} s)")
    print(f"ratio ours/peer: {t_peer / t_ours:.2f}x; identical file contents for {agree}/{len(r_ours)} kept PRs")

    from swerl_jax.curate.runner import run_curation

    rates = {}
    for n in args.workers:
        with tempfile.TemporaryDirectory() as out:
            funnel = run_curation(args.clones, out, CurateConfig(drop_benchmark_instances=False), beam_args=[
                "--direct_running_mode=multi_processing", f"--direct_num_workers={n}"], verbose=False)
        rates[n] = funnel["pr_candidates"] / funnel["seconds"]
        print(f"pipeline, FnApiRunner {n} worker(s): {funnel['pr_candidates']} PRs -> {funnel['kept']} records in "
              f"{funnel['seconds']:.1f} s = {rates[n]:.1f} PRs/s")
    if 1 in rates and len(rates) > 1:
        for n in sorted(rates)[1:]:
            print(f"scaling 1 -> {n} workers: {rates[n] / rates[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
