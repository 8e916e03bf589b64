"""Command line: ``python -m swerl_jax.curate --clones DIR --out DIR [options] [beam options]``.

Beam options pass through unchanged, e.g.
  DirectRunner (default), 2 processes: --direct_num_workers=2 --direct_running_mode=multi_processing
  Dataflow: --runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp --num_workers=N
            --sdk_container_image=IMAGE (an image with this package installed; clones and --out must be
            on a file system every worker mounts)
  Flink:    --runner=FlinkRunner --flink_master=HOST:8081 --environment_type=LOOPBACK
  Spark:    --runner=SparkRunner --spark_master_url=spark://HOST:7077 --environment_type=LOOPBACK
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import sys

from swerl_jax.curate.config import CurateConfig


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our flags (one per CurateConfig field) and the rest, which are Beam's."""
    ap = argparse.ArgumentParser(prog="python -m swerl_jax.curate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clones", required=True, help="folder of clones named owner__name or owner__name.git")
    ap.add_argument("--out", required=True, help="output folder (records/, rl_seeds/, meta/, dropped/, funnel.json)")
    ap.add_argument("--events", nargs="*", default=[], help="GH Archive JSONL files or globs (.gz allowed)")
    ap.add_argument("--issues", nargs="*", default=[], help="issues JSONL: {repo, number, title, body, labels}")
    for f in dataclasses.fields(CurateConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "formats":
            ap.add_argument(flag, nargs="+", default=list(f.default), choices=["jsonl", "array_record"])
        else:
            ap.add_argument(flag, type=type(f.default), default=f.default, help=f"(default {f.default})")
    return ap.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args, beam_args = parse_args(sys.argv[1:] if argv is None else argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(CurateConfig)}
    values["formats"] = tuple(values["formats"])
    config = CurateConfig(**values)
    events = [p for pattern in args.events for p in (sorted(glob.glob(pattern)) or [pattern])]
    issues = [p for pattern in args.issues for p in (sorted(glob.glob(pattern)) or [pattern])]
    if not any(a.startswith("--direct_running_mode") for a in beam_args):
        beam_args = [*beam_args, "--direct_running_mode=multi_processing"]
    if not any(a.startswith("--direct_num_workers") for a in beam_args):
        beam_args = [*beam_args, "--direct_num_workers=2"]
    from swerl_jax.curate.runner import run_curation

    run_curation(args.clones, args.out, config, events, issues, beam_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
