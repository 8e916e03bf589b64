"""Synchronous against asynchronous GRPO (rl.max_staleness = k): wall time per step for the same samples.

Each variant is a `python -m swerl_jax.train` process (so `rl.trainer_cpus` pins the trainer before JAX starts),
on the same config, seed and SFT'd policy (the first variant trains the SFT stage; the others copy it, finished),
and trains `--steps` GRPO steps with the same prompts and samples per step. Variants:

  k0-any        today's loop, roles unpinned (the peer: what a user gets without this work)
  k0-pinned     the synchronous loop, sampler on core 0 and trainer (+ reward workers) on core 1
  k1-pinned     rl.max_staleness=1, plain clipped objective against the behaviour log-probs
  k1-decoupled  k = 1 with rl.off_policy=decoupled (one more forward pass per step: the proximal log-probs)
  k2-pinned     rl.max_staleness=2
  k2-stream     k = 2, agent episodes streamed across steps (agent.stream_ahead_batches=1: a step trains on the
                first groups to finish; agent configs only)
  k1-stream     k = 1 with partial rollouts (the stream: an episode in flight continues under each newer policy
                between its turns, each token keeping its version; agent configs only), against k1-pinned
  k1-partial    k = 1 with partial rollouts inside the sampler process (sampler.partial_rollouts: a version
                published while a request decodes is taken between two decode segments, the rows in flight
                re-prefilled under it; needs sampler.mode=process)

and prints the mean seconds per step over steps 3..N (1-2 compile), episodes (samples) trained per hour, the
trainer's idle fraction (waiting for a batch: time/trainer_idle_frac), the sampler's (no generate call running:
time/sampler_idle_frac), the producer's (held by the bound), generated tokens/s per device, the staleness, the
reward, and each variant's speed-up over k0-any and k0-pinned. Partial rollouts against k = 1 without them
(issue 59), side by side in one run:

    .venv/bin/python benchmarks/async_rl.py --config=experiments/agent_tiny_cpu.py --steps=8 \
        --variants=k1-pinned,k1-stream,k1-partial --set=--config.sampler.mode=process \
        --set=--config.agent.kv_cache=reprefill

    .venv/bin/python benchmarks/async_rl.py --config=experiments/tiny_cpu.py --steps=10
    .venv/bin/python benchmarks/async_rl.py --config=experiments/agent_tiny_cpu.py --steps=8 \
        --set=--config.sampler.mode=process --set=--config.agent.kv_cache=reprefill   # every variant
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
PINNED = ["--config.sampler.cpus=0", "--config.rl.trainer_cpus=1"]
VARIANTS = {
    "k0-any": [],
    "k0-pinned": PINNED,
    "k1-pinned": PINNED + ["--config.rl.max_staleness=1"],
    "k1-decoupled": PINNED + ["--config.rl.max_staleness=1", "--config.rl.off_policy=decoupled"],
    "k2-pinned": PINNED + ["--config.rl.max_staleness=2"],
    "k2-stream": PINNED + ["--config.rl.max_staleness=2", "--config.agent.stream_ahead_batches=1"],
    "k1-stream": PINNED + ["--config.rl.max_staleness=1", "--config.agent.stream_ahead_batches=1"],
    "k1-partial": PINNED + ["--config.rl.max_staleness=1", "--config.sampler.partial_rollouts=True"],
}


def run_variant(name: str, config: str, steps: int, root: pathlib.Path, sft_from: pathlib.Path | None,
                common: list[str]) -> list[dict]:
    """Train one variant in root/name; returns its GRPO metrics rows."""
    workdir = root / name
    if sft_from is not None and not (workdir / "sft").exists():
        # finished: restored, not retrained. The variants differ only in rl.*, sampler.* and agent.* keys the SFT
        # stage does not read; shared_from.json says whose stage it is (a workdir with checkpoints and no
        # config.json is otherwise refused: nothing would say which config made them)
        shutil.copytree(sft_from / "sft", workdir / "sft")
        sft_steps = json.loads((sft_from / "config.json").read_text())["sft"]["num_steps"]
        (workdir / "sft" / "shared_from.json").write_text(json.dumps({"run": str(sft_from), "sft_steps": sft_steps}))
    cmd = [sys.executable, "-m", "swerl_jax.train", f"--config={config}", f"--workdir={workdir}",
           f"--config.rl.num_steps={steps}", "--config.logging.progress_bar=False", "--config.eval.every_steps=0",
           "--config.checkpoint.every_steps=1000", "--config.logging.every_steps=1", *common, *VARIANTS[name]]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def summarize(rows: list[dict], episodes_per_step: int) -> dict[str, float]:
    """Means over steps 3..N of the step time and the async figures."""
    warm = [r for r in rows if r["step"] >= 3] or rows
    mean = lambda key, default=0.0: statistics.mean(r.get(key, default) for r in warm)  # noqa: E731
    return {"step_s": mean("time/step_s"), "train_s": mean("time/train_s"), "generate_s": mean("time/generate_s"),
            "episodes_h": 3600 * episodes_per_step / mean("time/step_s"),
            "trainer_idle": mean("time/trainer_idle_frac", float("nan")),
            "sampler_idle": mean("time/sampler_idle_frac", float("nan")),
            "tokens_s_dev": mean("time/generated_tokens_per_s_per_device", float("nan")),
            "producer_idle": mean("async/producer_idle_frac", float("nan")),
            "staleness": mean("staleness_mean"), "reward": statistics.mean(r["reward_mean"] for r in rows)}


def main() -> None:
    """Run the variants and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="experiments/tiny_cpu.py")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--keep", default="", help="keep the run folders here (default: a temporary folder)")
    ap.add_argument("--set", action="append", default=[], help="a --config.X=V flag for every variant")
    args = ap.parse_args()
    if os.cpu_count() < 2:
        raise SystemExit("async_rl.py pins the sampler and the trainer to cores 0 and 1: it needs 2 cores")
    root = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="async_rl_"))
    names = args.variants.split(",")
    if "agent" not in pathlib.Path(args.config).stem and "--variants" not in " ".join(sys.argv):
        names = [n for n in names if not n.endswith("-stream")]  # agent episodes: not variants of a repair config
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; known: {', '.join(VARIANTS)}")
    results, sft = {}, None
    try:
        for name in names:
            rows = run_variant(name, args.config, args.steps, root, sft, args.set)
            rl = json.loads((root / name / "config.json").read_text())["rl"]
            results[name] = summarize(rows, int(rl["prompts_per_step"]) * int(rl["num_samples"]))
            sft = sft or root / name
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.config} {' '.join(args.set)}: {args.steps} GRPO steps, means over steps 3..{args.steps}; "
          f"{os.cpu_count()} cores")
    head = ("variant", "s/step", "episodes/h", "train_s", "gen_s", "trainer idle", "sampler idle", "producer idle",
            "tok/s/dev", "staleness", "reward", "vs k0-any", "vs k0-pinned", "vs k1-pinned")
    print("".join(f"{h:>14}" for h in head))
    for name, r in results.items():
        ratios = [results[b]["step_s"] / r["step_s"] if b in results else float("nan")
                  for b in ("k0-any", "k0-pinned", "k1-pinned")]
        cells = (name, f"{r['step_s']:.2f}", f"{r['episodes_h']:.0f}", f"{r['train_s']:.2f}", f"{r['generate_s']:.2f}",
                 f"{r['trainer_idle']:.0%}", f"{r['sampler_idle']:.0%}", f"{r['producer_idle']:.0%}",
                 f"{r['tokens_s_dev']:.1f}", f"{r['staleness']:.2f}",
                 f"{r['reward']:+.3f}", *(f"{x:.2f}x" for x in ratios))
        print("".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()
