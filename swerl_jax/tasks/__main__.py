"""`python -m swerl_jax.tasks COMMAND ...`: executable tasks.

    python -m swerl_jax.tasks generate --repo /work/.mirror/pytoolz+toolz/repo --commit HEAD --out DIR \\
        [--name pytoolz/toolz] [--limit N] [--workers N] [--seed S] [--pairs N] [--spec '{"python": "3.11"}']
    python -m swerl_jax.tasks revert --records PRS.jsonl --repos CLONES --out DIR
    python -m swerl_jax.tasks import --format {swe-gym,swe-rebench,swe-smith,r2e-gym} IN --out OUT.jsonl [--repos DIR]

generate: injected bugs in a real repository, each validated in the sandbox (`tasks.generation`); revert: PR records
with their code undone, validated the same way; both collect DIR into instances, the by-file split, the
contamination report and the summary table. import: a published task set, downloaded as a local JSON-lines, JSON or
parquet file, into SWE-bench-shaped instances (`tasks.importers`), each marked runnable here or out of reach with its
reason (`out_of_reach`); every bad record is one line naming the record and the field, and the last line printed
counts them.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from swerl_jax.tasks import generation, importers, infer_spec


def build_parser() -> argparse.ArgumentParser:
    """The commands and their arguments."""
    p = argparse.ArgumentParser(prog="python -m swerl_jax.tasks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="mutate, validate and collect")
    g.add_argument("--repo", type=pathlib.Path, required=True, help="a mirror (bare git dir), clone or bundle")
    g.add_argument("--commit", required=True, help="the commit to mutate (a sha, tag or HEAD)")
    g.add_argument("--out", type=pathlib.Path, required=True)
    g.add_argument("--name", default=None, help="owner/name (default: from the --repo path)")
    g.add_argument("--limit", type=int, default=None, help="stop once this many tasks of the repository are kept")
    g.add_argument("--max-candidates", type=int, default=None, help="validate at most this many candidates")
    g.add_argument("--workers", type=int, default=1)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--pairs", type=int, default=20, help="pairs of bugs among the candidates")
    g.add_argument("--spec", default="{}", help="JSON overrides of the inferred spec (keys: "
                   f"{', '.join(infer_spec.KEYS)})")
    g.add_argument("--timeout", type=float, default=300.0, help="seconds for one test run")
    g.add_argument("--memory-gb", type=float, default=4.0)
    g.add_argument("--env-cache", type=pathlib.Path, default=None, help="default $SWERL_JAX_HOME/eval/envs")
    g.add_argument("--benchmarks", type=pathlib.Path, default=generation.DEFAULT_BENCHMARKS,
                   help="folder with swebench_lite.json and swebench_verified.jsonl (contamination report)")
    g.add_argument("--heldout-fraction", type=float, default=0.2)
    g.add_argument("--no-progress", action="store_true")
    r = sub.add_parser("revert", help="reverted-PR tasks from PR records (data/records.py), validated")
    r.add_argument("--records", type=pathlib.Path, required=True, help="PR records (.jsonl) with test_patch")
    r.add_argument("--repos", type=pathlib.Path, required=True, help="clones: owner__name[.git] or .bundle")
    r.add_argument("--out", type=pathlib.Path, required=True)
    r.add_argument("--spec", default="{}", help="JSON overrides of the inferred spec")
    r.add_argument("--timeout", type=float, default=300.0)
    r.add_argument("--memory-gb", type=float, default=4.0)
    r.add_argument("--env-cache", type=pathlib.Path, default=None)
    imp = sub.add_parser("import", help="a published task set -> SWE-bench-shaped instances")
    imp.add_argument("input", help="the downloaded file (.jsonl, .json or .parquet)")
    imp.add_argument("--format", required=True, choices=sorted(importers.FORMATS), help="the set's own shape")
    imp.add_argument("--out", required=True, help="instances, one JSON object a line")
    imp.add_argument("--repos", default="", help="the clones the harness will use (owner__name[.git]): an "
                     "instance whose clone is not there is marked out of reach")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run a command; returns the collected summary (generate, revert) or the import's counts."""
    args = build_parser().parse_args(argv)
    if args.command != "import":
        return generation.run(args)
    from swerl_jax.tasks.imported import import_file

    report = import_file(args.format, args.input, args.out, args.repos or None)
    for line in report.bad:
        print(f"bad record: {line}", file=sys.stderr)
    print(report.line())
    return {"imported": report.line()}


if __name__ == "__main__":
    from swerl_jax.cli import run_cli

    run_cli("python -m swerl_jax.tasks", main, resume="run the same command again (decided candidates are kept)")
