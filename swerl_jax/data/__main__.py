"""Command line for PR record files.

    python -m swerl_jax.data validate RECORDS              counts valid/invalid records with reasons (exit 1 if any)
    python -m swerl_jax.data convert RECORDS OUT           JSONL <-> ArrayRecord (by extension), valid records only
    python -m swerl_jax.data import-swebench --instances F --clones DIR --out OUT [--source NAME]
    python -m swerl_jax.data stats RECORDS [--tokenizer PATH] [--max-prompt-len N]
    python -m swerl_jax.data split RECORDS --out-train A --out-heldout B --heldout-fraction F [--seed S]
                                   [--by instance|repo]   seeded train / held-out split (`swerl_jax.data.select`)

RECORDS is what `data.train_files` takes (`swerl_jax.data.paths`): a file, a directory of shards (curation's
OUT/rl_seeds), a glob ('OUT/records/*.array_record'), or a comma-separated list of them. Duplicate instance_ids
are found across all the files.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import pathlib
import sys
from collections.abc import Iterator

import numpy as np

from swerl_jax.data.paths import expand_record_paths
from swerl_jax.data.prompts import build_prompt
from swerl_jax.data.records import (
    ARRAY_RECORD_SUFFIXES,
    JSONL_SUFFIXES,
    ErrorCounter,
    read_records,
    write_records,
)
from swerl_jax.data.select import split_records
from swerl_jax.data.swebench import import_swebench, load_instances


def read_all(spec: str, on_error) -> Iterator[dict]:
    """The valid records of every file `spec` names, duplicates checked across the files."""
    first_seen: dict[str, str] = {}
    for path in expand_record_paths(spec, key="RECORDS"):
        yield from read_records(path, on_error=on_error, first_seen=first_seen)


def _print_errors(counter: ErrorCounter, out) -> None:
    for reason, n in counter.counts.most_common():
        print(f"  {n:6d}  {reason}", file=out)
    for message in counter.messages:
        print(f"  e.g. {message}", file=out)


def cmd_validate(args: argparse.Namespace) -> int:
    """Count valid and invalid records; exit status 1 when any is invalid."""
    errors = ErrorCounter()
    valid = sum(1 for _ in read_all(args.file, errors))
    print(f"{args.file}: {valid} valid, {errors.total} invalid")
    _print_errors(errors, sys.stdout)
    return 1 if errors.total else 0


def cmd_convert(args: argparse.Namespace) -> int:
    """Copy the valid records of IN into OUT (format by extension); invalid ones are reported."""
    errors = ErrorCounter()
    n = write_records(args.out, read_all(args.inp, errors))
    print(f"wrote {n} records to {args.out}; skipped {errors.total} invalid")
    _print_errors(errors, sys.stdout)
    return 0


def cmd_import_swebench(args: argparse.Namespace) -> int:
    """SWE-bench instances + clones -> records; failures counted by reason (exit 1 when none imports)."""
    instances = load_instances(args.instances)
    if not pathlib.Path(args.clones).is_dir():
        raise FileNotFoundError(f"--clones {args.clones}: no such folder (it holds owner__name or owner__name.git "
                                "clones)")
    failures: list = []
    records = import_swebench(instances, args.clones, args.source, on_error=failures.append)
    first = next(records, None)
    if first is None:  # nothing to write: an existing --out stays as it is
        n = 0
        print(f"imported 0 of {len(instances)} instances; {args.out} not written; {len(failures)} failed")
    else:
        n = write_records(args.out, itertools.chain([first], records))
        print(f"imported {n} of {len(instances)} instances into {args.out}; {len(failures)} failed")
    for reason, count in collections.Counter(f.reason for f in failures).most_common():
        print(f"  {count:6d}  {reason}")
    for f in failures[:20]:
        print(f"  e.g. {f}")
    return 0 if n or not instances else 1


def _percentiles(values: list[int]) -> str:
    if not values:
        return "-"
    p = np.percentile(values, [0, 50, 90, 100])
    return "min {:.0f} / median {:.0f} / p90 {:.0f} / max {:.0f}".format(*p)


def cmd_stats(args: argparse.Namespace) -> int:
    """Counts per repo and source, files and characters per record, prompt tokens with --tokenizer."""
    errors = ErrorCounter()
    records = list(read_all(args.file, errors))
    print(f"{args.file}: {len(records)} valid records, {errors.total} invalid")
    stats = {
        "repos": collections.Counter(r["repo"] for r in records),
        "sources": collections.Counter(r["source"] for r in records),
    }
    for name, counter in stats.items():
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in counter.most_common(10)))
    print("files in context:", _percentiles([len(r["code_context"]) for r in records]))
    print("context chars:   ", _percentiles([sum(map(len, r["code_context"].values())) for r in records]))
    print("issue chars:     ", _percentiles([len(r["problem_statement"]) for r in records]))
    if args.tokenizer is not None:
        from swerl_jax.tokenizer import load_tokenizer  # transformers: only `stats --tokenizer` needs it

        tok = load_tokenizer(args.tokenizer)
        prompts = [build_prompt(r, tok, args.max_prompt_len) for r in records]
        print("prompt tokens:   ", _percentiles([p.num_tokens for p in prompts]))
        cut = collections.Counter(d.action for p in prompts for d in p.decisions)
        print(f"budget {args.max_prompt_len}: {sum(not p.fits for p in prompts)} too long; files " +
              json.dumps(dict(cut)))
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    """Write RECORDS' valid records to --out-train and --out-heldout (`select.split_records`); one line each."""
    for flag, out in (("--out-train", args.out_train), ("--out-heldout", args.out_heldout)):
        if pathlib.Path(out).exists():
            raise ValueError(f"{flag} {out}: already exists (the split never overwrites a file)")
        if not out.endswith(JSONL_SUFFIXES + ARRAY_RECORD_SUFFIXES):
            raise ValueError(f"{flag} {out}: not a record file name (ends with one of "
                             f"{', '.join(JSONL_SUFFIXES + ARRAY_RECORD_SUFFIXES)})")
    if pathlib.Path(args.out_train).resolve() == pathlib.Path(args.out_heldout).resolve():
        raise ValueError(f"--out-train and --out-heldout are the same file ({args.out_train})")
    errors = ErrorCounter()
    records = list(read_all(args.file, errors))
    if not records:
        raise ValueError(f"{args.file}: no valid records ({errors.total} invalid)")
    train, heldout = split_records(records, args.heldout_fraction, args.seed, args.by)
    write_records(args.out_train, iter(train))
    write_records(args.out_heldout, iter(heldout))
    print(f"split {len(records)} records by {args.by} (seed {args.seed}, held-out fraction {args.heldout_fraction}): "
          f"{len(train)} train -> {args.out_train}, {len(heldout)} held out -> {args.out_heldout}; skipped "
          f"{errors.total} invalid")
    _print_errors(errors, sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the CLI."""
    parser = argparse.ArgumentParser(prog="python -m swerl_jax.data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="count valid/invalid records with reasons")
    p.add_argument("file", metavar="RECORDS", help="a records file, directory, glob or comma-separated list")
    p.set_defaults(fn=cmd_validate)
    p = sub.add_parser("convert", help="JSONL <-> ArrayRecord")
    p.add_argument("inp", metavar="RECORDS", help="a records file, directory, glob or comma-separated list")
    p.add_argument("out", metavar="OUT")
    p.set_defaults(fn=cmd_convert)
    p = sub.add_parser("import-swebench", help="SWE-bench instances + git clones -> records")
    p.add_argument("--instances", required=True, help=".json/.jsonl/.parquet file or a Hugging Face dataset name")
    p.add_argument("--clones", required=True, help="directory of clones named owner__name")
    p.add_argument("--out", required=True, help="output .jsonl or .array_record")
    p.add_argument("--source", default="swe-bench", help="value of the records' source field")
    p.set_defaults(fn=cmd_import_swebench)
    p = sub.add_parser("stats", help="summary of a record file")
    p.add_argument("file", metavar="RECORDS", help="a records file, directory, glob or comma-separated list")
    p.add_argument("--tokenizer", nargs="?", const="", default=None,
                   help="also count prompt tokens (no value: the SmolLM2 tokenizer)")
    p.add_argument("--max-prompt-len", type=int, default=16384)
    p.set_defaults(fn=cmd_stats)
    p = sub.add_parser("split", help="seeded train / held-out split of records (by instance or repository)")
    p.add_argument("file", metavar="RECORDS", help="a records file, directory, glob or comma-separated list")
    p.add_argument("--out-train", required=True, help="output .jsonl or .array_record for the training side")
    p.add_argument("--out-heldout", required=True, help="output .jsonl or .array_record for the held-out side")
    p.add_argument("--heldout-fraction", type=float, required=True, help="expected share held out, in (0, 1)")
    p.add_argument("--seed", type=int, default=0, help="the split's seed (same seed, same split)")
    p.add_argument("--by", default="instance", help="instance (default) or repo: every repository on one side")
    p.set_defaults(fn=cmd_split)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status. Missing files and bad arguments print one line, not a traceback."""
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
