"""GRPO step-time breakdown, and whether the reward service is off the critical path.

Runs a few GRPO steps of an experiment twice on the same prompts, seeds and policy:

  overlapped  sampler.prompts_per_request=1: each prompt's group is scored by the reward workers while the
              sampler generates the next prompt's group (the trainer's design);
  sequential  sampler.prompts_per_request=0: all groups generated in one request, then all scored (the
              straightforward loop, the peer).

and prints the mean seconds per phase (generate, reward wall, reward exposed = waited for after generation,
log-probs, train, weight sync, whole step; the first step, which compiles, is excluded) and the ratio.

    .venv/bin/python benchmarks/grpo_step.py --config=experiments/tiny_cpu.py --steps=6 --sft-from=workdirs/demo
    .venv/bin/python benchmarks/grpo_step.py --config=experiments/smollm2_cpu.py --steps=4

`--sft-from DIR` reuses a finished SFT stage (DIR/sft, e.g. the `make demo` run's) so tiny_cpu's policy writes
well-formed answers and the reward does real work; without it tiny_cpu runs no SFT (every answer is malformed,
and the reward is nearly free).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = pathlib.Path(__file__).resolve().parents[1]
PHASES = ("generate_s", "reward_wall_s", "reward_wait_s", "logprobs_s", "train_s", "sync_s", "step_s")


def load_config(path: str, overrides: dict):
    """An experiment config with `overrides` ({dotted key: value}) applied."""
    import importlib.util

    sys.path.insert(0, str(REPO))  # experiments/ imports its siblings as a package
    spec = importlib.util.spec_from_file_location("bench_config", REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config


def run_variant(config_path: str, steps: int, prompts_per_request: int, sft_from: str | None) -> list[dict]:
    """Train `steps` GRPO steps in a fresh workdir; returns the metrics rows."""
    from swerl_jax.runs.metrics import read_metrics
    from swerl_jax.train import run_experiment

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="grpo_step_"))
    overrides = {"rl.num_steps": steps, "sampler.prompts_per_request": prompts_per_request,
                 "logging.progress_bar": False, "checkpoint.every_steps": 1000}
    if sft_from:
        shutil.copytree(pathlib.Path(sft_from) / "sft", workdir / "sft")  # finished: restored, not retrained
    else:
        overrides["sft.num_steps"] = 0
    config = load_config(config_path, overrides)
    try:
        run_experiment(config, workdir)
        return read_metrics(workdir / "metrics.jsonl")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def summarize(rows: list[dict]) -> dict[str, float]:
    """Mean per phase over the steps after the first (compilation)."""
    warm = rows[1:] or rows
    out = {p: statistics.mean(r[f"time/{p}"] for r in warm) for p in PHASES}
    out["reward_mean"] = statistics.mean(r["reward_mean"] for r in rows)
    out["format_error_rate"] = statistics.mean(r["format_error_rate"] for r in rows)
    return out


def main() -> None:
    """Run both variants and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="experiments/tiny_cpu.py")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--sft-from", default="", help="a workdir whose finished SFT stage to start from")
    args = ap.parse_args()
    ours = summarize(run_variant(args.config, args.steps, 1, args.sft_from or None))
    peer = summarize(run_variant(args.config, args.steps, 0, args.sft_from or None))
    print(f"\n{args.config}: {args.steps} steps, means over steps 2..{args.steps} (seconds)")
    print(f"{'phase':<16}{'overlapped':>12}{'sequential':>12}{'seq / ovl':>11}")
    for p in PHASES:
        ratio = peer[p] / ours[p] if ours[p] > 0 else float("nan")
        print(f"{p:<16}{ours[p]:>12.3f}{peer[p]:>12.3f}{ratio:>10.2f}x")
    hidden = 1 - ours["reward_wait_s"] / ours["reward_wall_s"] if ours["reward_wall_s"] > 0 else 1.0
    print(f"reward wall time hidden behind generation (overlapped): {hidden:.0%}")
    print(f"reward mean {ours['reward_mean']:+.3f} / {peer['reward_mean']:+.3f}; malformed "
          f"{ours['format_error_rate']:.0%} / {peer['format_error_rate']:.0%}")


if __name__ == "__main__":
    main()
