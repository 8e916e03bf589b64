"""`python -m swerl_jax.tasks COMMAND ...`: executable tasks.

    python -m swerl_jax.tasks import --format {swe-gym,swe-rebench,swe-smith,r2e-gym} IN --out OUT.jsonl [--repos DIR]

import: a published task set, downloaded as a local JSON-lines, JSON or parquet file, into SWE-bench-shaped
instances (`tasks.importers`), each marked runnable here or out of reach with its reason (`out_of_reach`); every
bad record is one line naming the record and the field, and the last line printed counts them.
"""

from __future__ import annotations

import argparse
import sys

from swerl_jax.tasks import importers


def build_parser() -> argparse.ArgumentParser:
    """The commands and their arguments."""
    p = argparse.ArgumentParser(prog="python -m swerl_jax.tasks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="a published task set -> SWE-bench-shaped instances")
    imp.add_argument("input", help="the downloaded file (.jsonl, .json or .parquet)")
    imp.add_argument("--format", required=True, choices=sorted(importers.FORMATS), help="the set's own shape")
    imp.add_argument("--out", required=True, help="instances, one JSON object a line")
    imp.add_argument("--repos", default="", help="the clones the harness will use (owner__name[.git]): an "
                     "instance whose clone is not there is marked out of reach")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run a command; the exit status is 0 (bad records are counted, not fatal)."""
    args = build_parser().parse_args(argv)
    from swerl_jax.tasks.imported import import_file

    report = import_file(args.format, args.input, args.out, args.repos or None)
    for line in report.bad:
        print(f"bad record: {line}", file=sys.stderr)
    print(report.line())
    return 0


if __name__ == "__main__":
    from swerl_jax.cli import run_cli

    run_cli("python -m swerl_jax.tasks", main, resume="fix the input and run the same command again")
