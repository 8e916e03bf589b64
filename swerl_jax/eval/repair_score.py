"""The paper's oracle-file repair metric: each PR record's SWE-RL prompt (its oracle files shown), the policy's
answer, scored by the SWE-RL reward. The paper reports it greedy (base 12.2% format / 5.4 score, SFT 96.2 / 29.6,
RL 95.6 / 34.8; discrete-reward RL 94.2 / 29.0).

    python -m swerl_jax.eval.repair_score --config=experiments/tiny_cpu.py --records FILE --out DIR \\
        [--weights WORKDIR/policy [--version N]] [--samples 1] [--temperature 0] \\
        [--limit N] [--instance_ids ID,ID,... | --instance_ids @FILE]

    format_rate  share of answers that are well formed (reward != -1)
    score        100 x the mean reward with malformed answers counted 0 (the paper's base model: 12.2% format,
                 score 5.4, so malformed answers cannot count -1 there); `mean_reward` keeps the -1s
    exact_rate   share of answers whose edits reproduce the PR (reward 1)
    resolved_rate  share of answers whose edit passes the record's hidden unit tests, for records that carry them
                 (the testbed's, swerl_jax/testbed: run in the sandbox); None when no record has hidden tests

The policy is the config's model (random init or `model.hf_dir`) or, with `--weights`, a published policy version
(the newest unless `--version`); `--address HOST:PORT` asks a running sampler server instead. Records whose prompt
does not fit `data.max_prompt_len` or cannot be built are skipped and counted by reason (the summary line names
them). `DIR/repair.jsonl` gets one row per answer, `DIR/summary.json` the figures, `DIR/repair_settings.json` the
flags and config that made them, and the last line printed is the summary. A DIR holding results of other settings
is refused; the same command again starts over.

A subset: `--instance_ids` scores only the named records (comma-separated, or `@FILE` with one id per line; an id
the records do not hold is an error naming it), `--limit N` the first N records (after `--instance_ids`). Both are
in repair_settings.json and summary.json (`selected`), so a subset's score is never read as the whole file's.
A progress bar (stderr) counts records prompted, prompts answered and answers scored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
from collections.abc import Callable

import numpy as np

from swerl_jax.data.paths import blocking_file, expand_record_paths, user_path, user_record_spec
from swerl_jax.data.records import ErrorCounter, read_records
from swerl_jax.data.select import select_records
from swerl_jax.rl.heldout import Generate, RepairScore, engine_generate, repair_score, write_answer_rows
from swerl_jax.sampler.types import SamplingParams


def client_generate(client, tokenizer, sampling: SamplingParams, num_samples: int, seed: int = 0) -> Generate:
    """A `Generate` over a running sampler server (`SamplerClient`); texts decoded with the run's tokenizer.
    With `progress=`, the prompts go in requests of the server's batch (`prompt_offset` keeps each prompt's
    random keys, so the answers are the one request's) and each request's prompts are counted as it returns."""
    def generate(prompts: list[np.ndarray], progress: Callable[[int], None] | None = None) -> list[list[str]]:
        rows = [p.tolist() for p in prompts]
        per_call = len(rows) if progress is None else max(1, int(client.ping()["max_batch"]) // num_samples)
        groups = []
        for start in range(0, len(rows), per_call):
            groups += client.generate(rows[start:start + per_call], sampling, num_samples=num_samples, seed=seed,
                                      prompt_offset=start)
            if progress is not None:
                progress(len(rows[start:start + per_call]))
        return [[c.text if c.text is not None else tokenizer.decode(c.tokens, skip_special_tokens=True)
                 for c in group] for group in groups]

    return generate


def _parser() -> argparse.ArgumentParser:
    # the whole docstring: its first line cut the first sentence at "the policy's" (issue 46 item 15)
    p = argparse.ArgumentParser(prog="python -m swerl_jax.eval.repair_score", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="--config.KEY=VALUE (or --config.KEY VALUE): override a config key (repeatable)")
    p.add_argument("--config", required=True, help="experiment file (experiments/NAME.py[:arg]): model, tokenizer, "
                   "prompt budget, sampler limits, eval.reward_kind")
    p.add_argument("--records", required=True, help="PR records (file, directory, glob or comma-separated list)")
    p.add_argument("--out", required=True, help="directory for repair.jsonl and summary.json")
    p.add_argument("--weights", default="", help="a published policy directory (WORKDIR/policy)")
    p.add_argument("--version", type=int, default=None, help="policy version in --weights (default: the newest)")
    p.add_argument("--hf_dir", default="", help="a Hugging Face directory to evaluate (sets model.hf_dir and "
                   "model.tokenizer; e.g. an `eval.export` of an SFT checkpoint)")
    p.add_argument("--address", default="", help="HOST:PORT of a running sampler server instead of a local engine")
    p.add_argument("--random_init", action="store_true", help="score the config's seeded random init (only when "
                   "asked: a model without --weights, --hf_dir or model.hf_dir is otherwise an error)")
    p.add_argument("--samples", type=int, default=1, help="answers per record (the paper: 1, greedy)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max_new_tokens", type=int, default=0, help="default: sampler.max_new_tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--instance_ids", default="", help="score only these records: comma-separated instance ids, or "
                   "@FILE with one per line (each must be in --records)")
    p.add_argument("--limit", type=int, default=0, help="score only the first N records (after --instance_ids; "
                   "0: all)")
    p.add_argument("--no_progress", action="store_true", help="no progress bar")
    return p


SETTINGS = "repair_settings.json"  # in --out: the flags and config its results were made with


def check_out_dir(out: pathlib.Path, settings: dict) -> None:
    """Refuse an --out whose results (repair.jsonl, summary.json) came from other settings, listing the changed
    flags and config keys, as `eval run` refuses another config (issue 46 item 7: they were overwritten)."""
    from swerl_jax.runs.rundir import refuse_other_config

    if not (out / SETTINGS).exists() and any((out / name).exists() for name in ("repair.jsonl", "summary.json")):
        raise ValueError(f"--out {out} holds repair-score results whose settings are not recorded (no {SETTINGS}): "
                         f"choose another --out, or remove {out} to start over")
    refuse_other_config(out / SETTINGS, settings, what="other settings")


def main(argv: list[str] | None = None) -> RepairScore:
    """CLI entry point; returns the score (tests call it in-process)."""
    from swerl_jax.config import apply_overrides, config_file_arg, load_experiment_config, split_overrides

    rest, overrides = split_overrides(list(sys.argv[1:] if argv is None else argv))
    args = _parser().parse_args(rest)
    from swerl_jax.resolve import absolute_paths, resolve_config
    from swerl_jax.tokenizer import tokenizer_for

    # every path typed, from the current directory, once (Orbax refuses relative paths; a config's own paths
    # resolve as data paths do: absolute_paths)
    args.weights, args.hf_dir, args.out = user_path(args.weights), user_path(args.hf_dir), user_path(args.out)
    # --records too, before the settings record it: as typed, `recs.jsonl` from another directory (another file)
    # overwrote these results, and the same file typed absolute was refused (issue 46 held-out, item 1)
    args.records = user_record_spec(args.records)
    taken = blocking_file(args.out)
    if taken is not None:
        raise FileExistsError(f"--out {args.out}: {taken} is a file, not a folder")
    config = load_experiment_config(args.config)
    apply_overrides(config, overrides)
    absolute_paths(config)
    from swerl_jax.sampler import source as policy_source

    source = policy_source.PolicySource(
        weights=args.weights, version=args.version, hf_dir=args.hf_dir, address=args.address,
        random_init=args.random_init,
        flag={f: f"--{f}" for f in ("weights", "version", "hf_dir", "address", "random_init")}).check()
    if args.hf_dir:
        config.model.hf_dir = config.model.tokenizer = args.hf_dir
        config.model.name = "hf"  # FROM_CHECKPOINT: the folder evaluated is whatever model it holds
    from swerl_jax.sampler.client import SamplerError

    if args.samples < 1:
        raise ValueError(f"--samples {args.samples}: must be >= 1")
    out = pathlib.Path(args.out)
    config_file, sep, config_arg = config_file_arg(args.config).partition(":")  # the file, however typed
    settings = {**{f"--{k}": v for k, v in sorted(vars(args).items()) if k not in ("config", "out", "no_progress")},
                "--config": os.path.abspath(config_file) + sep + config_arg, "config": json.loads(config.to_json())}
    check_out_dir(out, settings)  # before anything loads: results of other settings are never overwritten
    config = resolve_config(config, check_files=True)
    evaluated = policy_source.describe(source, config, args.config)
    record_files = expand_record_paths(args.records, key="--records")
    invalid = ErrorCounter()  # counted and named: a score over fewer records than the file holds must say so
    records = [r for path in record_files for r in read_records(path, on_error=invalid)]
    if invalid.total and not records:
        raise ValueError(f"--records {args.records}: all {invalid.total} records are invalid (first: "
                         f"{invalid.messages[0]}); SWE-bench instances become PR records with python -m "
                         "swerl_jax.data import-swebench; nothing written")
    if invalid.total:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in invalid.counts.most_common())
        print(f"skipped {invalid.total} invalid records of {invalid.total + len(records)} ({reasons}); first: "
              f"{invalid.messages[0]}", flush=True)
    held = len(records)
    records = select_records(records, args.instance_ids, args.limit, args.records)
    if len(records) < held:
        print(f"scoring {len(records)} of the {held} records (--instance_ids / --limit)", flush=True)
    tokenizer = tokenizer_for(config.model)
    sampling = SamplingParams(temperature=args.temperature, top_p=config.sampler.top_p, top_k=config.sampler.top_k,
                              max_new_tokens=args.max_new_tokens or config.sampler.max_new_tokens).validate()
    if args.address:
        generate = client_generate(policy_source.open_client(config, source), tokenizer, sampling, args.samples,
                                   args.seed)
    else:
        generate = engine_generate(policy_source.open_engine(config, source, evaluated), sampling, args.samples,
                                   args.seed)
    policy_version = evaluated["policy_version"]
    rows: list[dict] = []
    try:
        result = repair_score(records, generate, tokenizer, config.data.max_prompt_len, config.data.prompt_style,
                              config.eval.reward_kind, rows, progress=not args.no_progress)
    except SamplerError as err:  # the server named by --address: one line, not a traceback
        raise ValueError(f"--address {args.address}: {err}") from None
    if result.scored == 0:  # a score of 0.0 over nothing is not a number to report
        raise ValueError(f"--records {args.records}: none of the {result.records} records could be scored "
                         f"({result.skipped or 'no records'}); nothing written")
    write_answer_rows(out / "repair.jsonl", rows)
    (out / SETTINGS).write_text(json.dumps(settings, indent=1))
    malformed: dict[str, int] = {}  # why answers scored -1, per reason
    for row in rows:
        if row["format_error"] is not None:
            malformed[row["format_error"]] = malformed.get(row["format_error"], 0) + 1
    summary = {**dataclasses.asdict(result), "samples": args.samples, "temperature": args.temperature,
               "config": args.config, "config_overrides": {k: v for k, v in overrides}, "records_files": record_files,
               "weights": args.weights,
               "policy_version": policy_version, "evaluated": evaluated, "format_errors": malformed,
               "invalid_records": dict(invalid.counts),
               "selected": {"instance_ids": args.instance_ids, "limit": args.limit, "of_records": held}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"evaluated: {evaluated['what']}", flush=True)
    print(result.line(), flush=True)
    return result


if __name__ == "__main__":
    from swerl_jax.cli import run_cli

    run_cli("python -m swerl_jax.eval.repair_score", main, resume="run the same command again (it starts over)")
