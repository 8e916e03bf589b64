"""Command line: ``python -m swerl_jax.curate --clones DIR --out DIR [--config.FIELD=VALUE ...] [beam options]``
(FIELD: a `CurateConfig` field, e.g. --config.max_changed_lines=500 --config.formats=jsonl).

PRs that are SWE-bench Lite / Verified instances are left out by default: --config.benchmark_instances names their
instance files (default: the Hugging Face datasets, which need the `datasets` package and the network), e.g.
--config.benchmark_instances=../shared/data/swebench_lite.json,../shared/data/swebench_verified.jsonl;
--config.drop_benchmark_instances=false keeps them.

A bar on stderr names each stage as it runs; Beam's INFO log lines are left out (its warnings and errors are
shown): --verbose keeps them.

Beam options pass through unchanged, e.g.
  FnApiRunner (default, local), 2 processes: --direct_num_workers=2 --direct_running_mode=multi_processing
  (Beam's DirectRunner downloads and tries its Prism runner first: --runner=DirectRunner to have that)
  Dataflow: --runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp --num_workers=N
            --sdk_container_image=IMAGE (an image with this package installed; clones and --out must be
            on a file system every worker mounts)
  Flink:    --runner=FlinkRunner --flink_master=HOST:8081 --environment_type=LOOPBACK
  Spark:    --runner=SparkRunner --spark_master_url=spark://HOST:7077 --environment_type=LOOPBACK
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import glob
import pathlib
import sys

from swerl_jax.cli import run_cli
from swerl_jax.config import split_overrides
from swerl_jax.curate.config import CurateConfig


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our arguments and the rest, which are Beam's. The curation settings are `--config.FIELD=VALUE` (every
    entry point's override style), one per CurateConfig field (`--config.formats=jsonl,array_record`); an unknown
    field is a KeyError naming the closest one (it is not passed on to Beam, which would ignore it)."""
    ap = argparse.ArgumentParser(prog="python -m swerl_jax.curate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="settings: " + ", ".join(f"--config.{f.name}={_show(f.default)}"
                                                                 for f in dataclasses.fields(CurateConfig)))
    ap.add_argument("--clones", required=True, help="folder of clones named owner__name or owner__name.git")
    ap.add_argument("--out", required=True, help="output folder (records/, rl_seeds/, meta/, dropped/, funnel.json)")
    ap.add_argument("--events", nargs="*", default=[], help="GH Archive JSONL files or globs (.gz allowed)")
    ap.add_argument("--issues", nargs="*", default=[], help="issues JSONL: {repo, number, title, body, labels}")
    ap.add_argument("--verbose", action="store_true", help="keep Beam's INFO log lines (left out by default; its "
                    "warnings and errors are always shown)")
    rest, overrides = split_overrides(argv)
    args, beam = ap.parse_known_args(rest)
    fields = {f.name: f for f in dataclasses.fields(CurateConfig)}
    for f in fields.values():
        setattr(args, f.name, f.default)
    for key, text in overrides:
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=1)
            raise KeyError(f"unknown config key {key}" + (f"; did you mean {close[0]}?" if close else "")
                           + " (python -m swerl_jax.curate --help lists them)")
        default = fields[key].default
        if isinstance(default, tuple):
            value = tuple(v for v in text.split(",") if v)
        elif isinstance(default, bool):  # bool("false") is True
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--config.{key}={text!r}: expected true or false")
            value = text.lower() in ("true", "1")
        else:
            try:
                value = type(default)(text)
            except ValueError:
                raise ValueError(f"--config.{key}={text!r}: expected {type(default).__name__}") from None
        setattr(args, key, value)
    return args, beam


def _show(default: object) -> str:
    return ",".join(default) if isinstance(default, tuple) else str(default)


def check_beam_flags(beam_args: list[str], ours: list[str]) -> None:
    """ValueError naming the first argument neither we nor Beam's own parser take, with the closest flag: Beam
    only logs "Discarding unparseable args" among its INFO lines and runs without it (`--isues` ran with no
    issues; `--temp-location` is not `--temp_location`)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    parsers = []  # Beam's parser with every PipelineOptions subclass's flags, as get_all_options builds it
    known = PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)  # {dest: default}
    _, unknown = parsers[0].parse_known_args(beam_args)
    flags = [a for a in unknown if a.startswith("-")] or unknown
    if flags:
        name = flags[0].lstrip("-").split("=", 1)[0]
        close = difflib.get_close_matches(name, [*ours, *known], n=1)
        raise ValueError(f"unknown flag {flags[0].split('=', 1)[0]}" + (f"; did you mean --{close[0]}?" if close
                                                                         else "")
                         + " (neither curation's nor an Apache Beam pipeline option)")


def check_inputs(clones: str, events: list[str], issues: list[str]) -> None:
    """FileNotFoundError naming a --clones folder without clones or an --events / --issues file that is not
    there, before Beam starts; a bundle there is named (git cannot read it as a clone)."""
    root = pathlib.Path(clones)
    if not root.is_dir():
        raise FileNotFoundError(f"--clones {clones}: no such folder")
    bundles = sorted(p.name for p in root.glob("*.bundle"))
    for name in bundles:
        print(f"python -m swerl_jax.curate: skipping {root / name}: a bundle, not a clone (git clone --mirror "
              f"{root / name} {root / name.removesuffix('.bundle')}.git makes one)", file=sys.stderr)
    if not any(p.is_dir() for p in root.iterdir()):
        raise FileNotFoundError(f"--clones {clones}: no clones in it (folders named owner__name or owner__name.git)")
    for flag, paths in (("--events", events), ("--issues", issues)):
        for path in paths:  # gs://, s3://, hdfs:// are Beam's to read (Dataflow)
            if "://" not in path and not pathlib.Path(path).is_file():
                raise FileNotFoundError(f"{flag} {path}: no such file (and no file matches it as a pattern)")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args, beam_args = parse_args(sys.argv[1:] if argv is None else argv)
    check_beam_flags(beam_args, ["clones", "out", "events", "issues", "verbose"])
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(CurateConfig)}
    values["formats"] = tuple(values["formats"])
    config = CurateConfig(**values)
    events = [p for pattern in args.events for p in (sorted(glob.glob(pattern)) or [pattern])]
    issues = [p for pattern in args.issues for p in (sorted(glob.glob(pattern)) or [pattern])]
    check_inputs(args.clones, events, issues)
    if not any(a.startswith("--direct_running_mode") for a in beam_args):
        beam_args = [*beam_args, "--direct_running_mode=multi_processing"]
    if not any(a.startswith("--direct_num_workers") for a in beam_args):
        beam_args = [*beam_args, "--direct_num_workers=2"]
    from swerl_jax.curate.runner import run_curation

    run_curation(args.clones, args.out, config, events, issues, beam_args, beam_info=args.verbose)
    return 0


if __name__ == "__main__":
    run_cli("python -m swerl_jax.curate", main, resume="run the same command again (curation starts over)",
            exit_code=int)
