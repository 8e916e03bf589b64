"""`python -m swerl_jax.train --config=experiments/NAME.py[:arg] --workdir=DIR [--config.X=...]`

Runs an experiment: the SFT stage when sft.num_steps > 0 (into DIR/sft), then GRPO when rl.num_steps > 0 (into
DIR). Both resume from their checkpoints, so re-running the same command after a crash or a kill continues
where the run stopped: an SFT stage that finished is not repeated (GRPO starts from its final checkpoint).
The workdir (default `workdirs/NAME[-arg]`) gets config.json (the resolved config; `configs/NNNN.json` keeps
every start's), metrics.jsonl, tensorboard/, rollouts/, checkpoints/, policy/ (weights published to the sampler)
and sampler/ (its log). Resuming with a config that differs in a field that changes results is refused unless
`--allow_config_change` (recorded in config_changes.jsonl; see `swerl_jax.runs.rundir`). A config key that does not
exist ends the program with one line naming it and the closest valid key. Libraries log warnings only
(`--verbose` shows their INFO lines); the run ends with a short summary (`swerl_jax.runs.summary`).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import sys
import time
from typing import Any

from swerl_jax import sharding
from swerl_jax.cli import absl_flags_parser, input_error_line, one_line_input_errors
from swerl_jax.data.paths import blocking_file
from swerl_jax.model.convert import CheckpointError
from swerl_jax.resolve import absolute_paths, ensure_resolved, resolve_config, start_warnings
from swerl_jax.rl.build import build_grpo_trainer
from swerl_jax.rl.collector import prompt_share
from swerl_jax.runs import affinity, rundir
from swerl_jax.runs.summary import summarize_run
from swerl_jax.sft.trainer import SFTTrainer
from swerl_jax.weights_check import check_hf_checkpoint

log = logging.getLogger("swerl_jax.train")


def enable_compile_cache() -> str:
    """JAX's persistent compilation cache for this process and the sampler it starts (inherits the environment):
    $JAX_COMPILATION_CACHE_DIR, default ~/.cache/swerl_jax/jax. A re-run or a resume skips XLA compilation."""
    path = os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                                 str(pathlib.Path.home() / ".cache" / "swerl_jax" / "jax"))
    if "jax" in sys.modules:  # already imported: the environment variable was read at import time
        import jax

        jax.config.update("jax_compilation_cache_dir", path)
    return path


def run_experiment(config: Any, workdir: str | os.PathLike, allow_config_change: bool = False) -> dict:
    """SFT (if configured) then GRPO (if configured) into `workdir`; returns a summary dict.

    A workdir with checkpoints is resumed; its config must match `config` in every field that changes results
    unless `allow_config_change` (`rundir.record_config`)."""
    config = ensure_resolved(config)  # typed sections; before anything starts or compiles, errors name the key
    for line in start_warnings(config):  # settings that run but will not do what they seem: said once, at start
        log.warning("%s", line)
    enable_compile_cache()
    if float(config.rl.trainer_memory_fraction) > 0:  # read when the GPU backend starts, below
        os.environ[affinity.MEM_FRACTION_ENV] = f"{float(config.rl.trainer_memory_fraction):.4g}"
    sharding.initialize_distributed(config)
    if int(config.rl.num_steps) > 0:
        import jax

        # however the processes were started (mesh.num_processes, JAX_NUM_PROCESSES, SLURM): before SFT spends its
        # time, not when the GRPO collector starts (issue 57 item 6). One line each (a SystemExit), also on every
        # process of a multi-process run, where `sharding.fail_alone` prints a traceback for anything else
        with one_line_input_errors("swerl_jax.train"):
            prompt_share(int(config.rl.prompts_per_step), jax.process_count(), "the JAX process count")
            problem = affinity.shared_device_problem(
                jax.default_backend(), float(config.rl.trainer_memory_fraction),
                float(config.sampler.memory_fraction), str(config.sampler.devices), str(config.sampler.mode))
            if problem:  # before SFT spends its hours: the sampler would fail to allocate when GRPO starts
                raise affinity.PlacementError(problem)
    # the checkpoint and tokenizer the run will load, checked before the workdir exists: a mismatch is one line and
    # leaves nothing behind (CheckpointError)
    check_hf_checkpoint(config)
    workdir = pathlib.Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if sharding.is_main_process():
        steps = rundir.record_config(workdir, config.to_json(indent=1), allow_change=allow_config_change)
    else:
        steps = rundir.latest_steps(workdir)
    summary: dict[str, Any] = {"workdir": str(workdir)}
    sft_steps, rl_steps = int(config.sft.num_steps), int(config.rl.num_steps)
    if rundir.is_finished(steps, sft_steps, rl_steps):
        log.warning("%s already finished (checkpoints at %s): nothing to train; delete it or choose another "
                    "--workdir for a new run", workdir, steps)
        summary["already_finished"] = steps
        if rl_steps > 0:  # GRPO resumes from its own checkpoint: the SFT stage, even deleted, is not trained again;
            sft_steps = 0  # its run() trains nothing and still publishes the final policy a kill may have missed
    params = None
    t0 = time.time()
    agent = str(config.rl.task) == "agent"
    if agent:  # multi-turn tool use (DeepSWE-style); imported only then: it brings the sandbox and the tools
        from swerl_jax.agent.sft import AgentSFTTrainer
    if sft_steps > 0:
        sft = (AgentSFTTrainer if agent else SFTTrainer)(config, workdir / "sft")
        params = sft.run()
        summary["sft"] = {"steps": sft_steps, "metrics": str(workdir / "sft" / "metrics.jsonl"),
                          "checkpoints": sft.checkpointer.directory, "seconds": round(time.time() - t0, 1)}
        if int(config.eval.every_steps) > 0 and not agent:  # the agent's held-out eval runs in its GRPO stage
            summary["sft"]["eval"] = evaluate_sft(config, sft, workdir / "sft" / EVAL_FILE)
    if rl_steps > 0:
        t1 = time.time()
        grpo = build_grpo_trainer(config, workdir, initial_params=params)  # the collector of rl.task
        del params  # GRPO placed its own copy
        summary["rl"] = {**grpo.run(), "seconds": round(time.time() - t1, 1)}
    return summary


EVAL_FILE = "eval.json"
EVAL_ROWS_FILE = "eval_rows.jsonl"  # the SFT evaluation's per-answer rows, beside EVAL_FILE


def evaluate_sft(config: Any, sft: SFTTrainer, path: pathlib.Path) -> dict | None:
    """The SFT policy's held-out repair metric (the GRPO trainer's `eval/*`, same records, greedy), written to
    `path` with the step: the RL-vs-SFT baseline, measured the same way. Single-process runs only (elsewhere:
    `eval.export --stage sft` then `eval.repair_score --hf_dir`)."""
    import jax

    if jax.process_count() > 1:
        log.warning("SFT held-out evaluation skipped in a multi-process run: export the SFT checkpoint and score "
                    "it with python -m swerl_jax.eval repair-score --hf_dir")
        return None
    from swerl_jax.rl.heldout import evaluate_params, write_answer_rows

    t0, answers = time.perf_counter(), []
    row = {"step": int(config.sft.num_steps), **evaluate_params(config, sft.policy.host_params(), answers),
           "time/eval_s": round(time.perf_counter() - t0, 2)}
    write_answer_rows(path.with_name(EVAL_ROWS_FILE), answers)  # per answer: for per-task paired comparisons
    path.write_text(json.dumps(row, indent=1))
    return row


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing whose errors are one line (`cli.absl_flags_parser`)."""
    return absl_flags_parser("swerl_jax.train")(argv)


def main(argv: list[str]) -> None:
    """absl entry point."""
    from absl import flags

    del argv
    f = flags.FLAGS
    config = f.config
    workdir = f.workdir or rundir.default_workdir(f["config"].config_filename)
    taken = blocking_file(workdir)
    if taken is not None:  # before any work: a file where the run's folder would go
        raise SystemExit(f"swerl_jax.train: --workdir {workdir}: {taken} is a file, not a folder")
    try:
        # the config's paths from the current directory (else the repository root), once: the sampler process and
        # a resume from another directory read the same folders
        config = resolve_config(absolute_paths(config))  # bad keys, types, values, missing files: one line
    except (ValueError, KeyError, TypeError, FileNotFoundError) as e:
        raise SystemExit(input_error_line("swerl_jax.train", e)) from None  # KeyError's quotes, not the message's
    # before JAX starts its CPU backend, whose thread pool is sized from the cores the process may use
    affinity.pin(affinity.parse_cpus(str(config.rl.trainer_cpus), "rl.trainer_cpus"), "rl.trainer_cpus")
    # several processes: one that fails exits at once, not after minutes at jax.distributed's shutdown barrier
    with sharding.fail_alone("swerl_jax.train", "run the same command to resume from the newest checkpoint"):
        summary = _run(config, workdir, f.allow_config_change)
    if sharding.is_main_process():
        print(json.dumps(summary, indent=1), flush=True)  # stdout stays one JSON document for scripts
        print(summarize_run(summary["workdir"]), file=sys.stderr, flush=True)


def _run(config: Any, workdir: str, allow_config_change: bool) -> dict:
    """`run_experiment`, its expected failures as one line (SystemExit)."""
    try:
        return run_experiment(config, workdir, allow_config_change=allow_config_change)
    except (rundir.ConfigChangeError, affinity.PlacementError, CheckpointError) as e:
        raise SystemExit(f"swerl_jax.train: {e}") from None
    except KeyboardInterrupt:  # the trainers closed their sampler, reward workers and checkpoint writes
        steps = rundir.latest_steps(workdir) if pathlib.Path(workdir).is_dir() else {}
        print(f"\nswerl_jax.train: interrupted; checkpoints {steps or 'none yet'} in {workdir}; run the same command "
              "to resume from the newest", file=sys.stderr, flush=True)
        raise SystemExit(sharding.INTERRUPTED) from None


def _define_flags() -> None:
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file("config", None, "experiment config file (experiments/NAME.py[:arg])")
    flags.DEFINE_string("workdir", "", "run directory (default: workdirs/NAME[-arg])")
    flags.DEFINE_bool("allow_config_change", False, "resume a run whose config differs in fields that change "
                      "results (the change is recorded in WORKDIR/config_changes.jsonl)")
    flags.DEFINE_bool("verbose", False, "show the libraries' INFO logs (Orbax, absl) as well as swerl_jax's")
    flags.mark_flag_as_required("config")


def quiet_logging(verbose: bool = False) -> None:
    """swerl_jax logs INFO; libraries (Orbax writes ~100 INFO lines per checkpoint) only warnings unless
    `verbose`."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("swerl_jax").setLevel(logging.INFO)
    if not verbose:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.WARNING)
        logging.getLogger("absl").setLevel(logging.WARNING)


if __name__ == "__main__":
    from absl import app

    quiet_logging("--verbose" in sys.argv[1:])
    _define_flags()
    app.run(main, flags_parser=parse_flags)
