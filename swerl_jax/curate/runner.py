"""Run the curation pipeline and publish its outputs atomically (used by ``python -m swerl_jax.curate``)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from swerl_jax.curate import pipeline, quiet, sinks
from swerl_jax.curate.benchmarks import benchmark_prs
from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.funnel import build_funnel, format_table
from swerl_jax.runs.progress import StageBar


def run_curation(
    clones_dir: str,
    out_dir: str,
    config: CurateConfig,
    event_files: Sequence[str] = (),
    issue_files: Sequence[str] = (),
    beam_args: Sequence[str] = (),
    verbose: bool = True,
    beam_info: bool = False,
) -> dict:
    """Run the pipeline, then publish ``out_dir/{records,rl_seeds,meta,dropped}/`` and ``out_dir/funnel.json``.

    ``beam_args`` are Beam pipeline options (``--runner``, ``--direct_num_workers``, Dataflow/Flink/Spark
    flags); without ``--runner`` the local FnApiRunner is used: Beam 2.77's DirectRunner would first download the
    Prism runner from GitHub (a binary fetched at run time) and, where that works, run there instead. Returns the
    funnel dict plus ``seconds``. If the pipeline fails nothing is published and the staging folder is removed.
    PRs that are SWE-bench Lite / Verified instances are dropped unless ``config.drop_benchmark_instances`` is off
    (`swerl_jax.curate.benchmarks`); a benchmark list that cannot be read fails here, before Beam starts.
    With ``verbose`` a bar (stderr) names each stage as it runs, with its elapsed time; Beam's INFO lines are left
    out of stderr unless ``beam_info`` (`swerl_jax.curate.quiet`; warnings and errors always pass).
    """
    with quiet.info_filtered_stderr(on=not beam_info) as real_stderr, \
            os.fdopen(os.dup(real_stderr), "w") as bar_file:  # the bar skips the line filter
        bar = StageBar(verbose, "curate", file=bar_file)
        bar.tick()
        try:
            funnel = _run(clones_dir, out_dir, config, event_files, issue_files, beam_args, bar)
        finally:
            bar.close()
    if verbose:
        print(format_table(funnel))
        print(f"{funnel['kept']} records, {funnel['rl_seeds']} RL seeds in {funnel['seconds']} s -> {out_dir}")
    return funnel


def _run(clones_dir: str, out_dir: str, config: CurateConfig, event_files: Sequence[str],
         issue_files: Sequence[str], beam_args: Sequence[str], bar: StageBar) -> dict:
    """`run_curation`'s stages, each named on `bar`; returns the funnel."""
    # the evaluation instances' PRs, read before anything starts: a list that cannot be read is one line
    if config.drop_benchmark_instances:
        bar.stage("reading the benchmark instance lists", None, "list")
    excluded = benchmark_prs(config.benchmark_instances) if config.drop_benchmark_instances else frozenset()
    os.makedirs(out_dir, exist_ok=True)
    staging = os.path.join(os.path.abspath(out_dir), f".staging-{uuid.uuid4().hex[:12]}")
    os.makedirs(staging)
    args = list(beam_args)
    if not any(a.startswith("--runner") for a in args):
        args.append("--runner=FnApiRunner")  # what the DirectRunner fell back to here, without the download
    start = time.perf_counter()
    try:
        bar.stage(f"Beam pipeline ({len(event_files)} event, {len(issue_files)} issue files: candidates, extract, "
                  "dedupe, relevant files, seeds, write)", None, "s")
        with beam.Pipeline(options=PipelineOptions(args)) as p:
            pipeline.build(p, clones_dir, staging, config, list(event_files), list(issue_files), excluded)
        with open(os.path.join(staging, "funnel_counts.json")) as f:
            counts = json.load(f)
        funnel = build_funnel(counts)
        datasets = [("records", config.formats), ("rl_seeds", config.formats), ("meta", ("jsonl",)),
                    ("dropped", ("jsonl",))]
        bar.stage("publishing records, rl_seeds, meta, dropped", len(datasets), "dataset")
        for dataset, formats in datasets:
            sinks.publish(staging, out_dir, dataset, config.num_shards, formats)
            bar.update(1)
        funnel["seconds"] = round(time.perf_counter() - start, 2)
        tmp = os.path.join(out_dir, ".funnel.json.tmp")
        with open(tmp, "w") as f:
            json.dump(funnel, f, indent=1)
        os.replace(tmp, os.path.join(out_dir, "funnel.json"))
    finally:
        sinks.remove_staging(staging)
    return funnel
