"""The whole GRPO loop on one GPU (issue 48): per-role GPU memory from the driver, and the loop's table from a sweep.

    python benchmarks/gpu_loop.py watch /tmp/mem.csv &      # nvidia-smi's per-process memory, every 0.5 s, by role
    python -m swerl_jax.sweep --config=experiments/testbed_gpu.py --sweep rl.max_staleness=0,1 --seeds 0 \\
        --share-sft --workdir /tmp/loop
    python benchmarks/gpu_loop.py report /tmp/loop --memory /tmp/mem.csv

`watch` asks the driver (`nvidia-smi --query-compute-apps`), not the processes, what each one holds, and labels it
by its command line: `trainer` (swerl_jax.train), `sampler` (swerl_jax.sampler.server), else `other`. With
XLA_PYTHON_CLIENT_PREALLOCATE=false a process's pool grows to its peak and is not returned, so the largest reading is
the role's peak (capped by its memory fraction). `report` prints, per run (one per rl.max_staleness): seconds per
GRPO step split into generation, reward (the wait the trainer saw, and the service's wall time), log-probs and
training; generated tokens per second; the trainer's allocator peak; and the held-out repair score, resolved and
format rates of the SFT policy (before GRPO) and the last evaluated GRPO version (after). The first step (its
compilations) is left out of the means and reported alone.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import statistics
import subprocess
import sys
import time

ROLES = (("swerl_jax.sampler.server", "sampler"), ("swerl_jax.train", "trainer"))


def role_of(pid: int) -> str:
    """The role of process `pid` from its command line ("gone" if it has exited)."""
    try:
        cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    return next((role for needle, role in ROLES if needle in cmd), "other")


def watch(path: str, every_s: float = 0.5) -> None:
    """Append `time,pid,role,used_mib` rows to `path` until killed."""
    with open(path, "a", newline="") as f:
        out = csv.writer(f)
        while True:
            res = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,"
                                  "nounits"], capture_output=True, text=True, timeout=30)
            now = round(time.time(), 2)
            for line in res.stdout.splitlines():
                pid, _, used = (x.strip() for x in line.partition(","))
                if pid.isdigit() and used.isdigit():
                    out.writerow([now, pid, role_of(int(pid)), used])
            f.flush()
            time.sleep(every_s)


def peak_by_role(path: str) -> dict[str, float]:
    """The largest reading of each role in a `watch` file, GiB (a role's processes summed per reading)."""
    per_time: dict[tuple[str, str], float] = {}
    with open(path, newline="") as f:
        for t, _pid, role, used in csv.reader(f):
            per_time[(t, role)] = per_time.get((t, role), 0.0) + int(used) / 1024
    peaks: dict[str, float] = {}
    for (_t, role), gib in per_time.items():
        peaks[role] = max(peaks.get(role, 0.0), gib)
    return peaks


def _mean(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return statistics.fmean(vals) if vals else None


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def run_table(run: pathlib.Path) -> dict:
    """One run's figures (see the module docstring)."""
    config = json.loads((run / "config.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"{run}/metrics.jsonl: no GRPO step logged")
    answers = int(config["rl"]["prompts_per_step"]) * int(config["rl"]["num_samples"])
    steady = rows[1:] or rows
    step_s = _mean(steady, "time/step_s")
    tokens = [r["completion_len_mean"] * answers for r in steady if "completion_len_mean" in r]
    gen = _mean(steady, "time/generate_s")
    evals = [r for r in rows if "eval/score" in r]
    sft_eval = run / "sft" / "eval.json"
    before = json.loads(sft_eval.read_text()) if sft_eval.is_file() else {}
    return {
        "run": run.name, "k": config["rl"]["max_staleness"], "steps": len(rows),
        "first_step_s": rows[0].get("time/step_s"), "step_s": step_s, "generate_s": gen,
        "reward_wait_s": _mean(steady, "time/reward_wait_s"), "reward_wall_s": _mean(steady, "time/reward_wall_s"),
        "logprobs_s": _mean(steady, "time/logprobs_s"), "train_s": _mean(steady, "time/train_s"),
        "trainer_wait_s": _mean(steady, "async/trainer_wait_s"),
        "gen_tok_per_s_of_step": (statistics.fmean(tokens) / step_s) if tokens and step_s else None,
        "gen_tok_per_s_of_generate": (statistics.fmean(tokens) / gen) if tokens and gen else None,
        "trainer_peak_gib": max((r["memory/trainer_peak_gib"] for r in rows if "memory/trainer_peak_gib" in r),
                                default=None),
        "reward_mean_first5": _mean(rows[:5], "reward_mean"), "reward_mean_last5": _mean(rows[-5:], "reward_mean"),
        "before": {k: before.get(f"eval/{k}") for k in ("score", "resolved_rate", "format_rate")},
        "before_step": before.get("step"),
        "after": {k: evals[-1].get(f"eval/{k}") for k in ("score", "resolved_rate", "format_rate")} if evals else {},
        "after_step": evals[-1]["step"] if evals else None,
        "eval_s": _mean(evals, "time/eval_s"),
    }


def report(sweep: str, memory: str = "") -> None:
    """Print the loop's table for every run of a sweep directory (and the memory peaks), and its JSON."""
    runs = sorted(p for p in (pathlib.Path(sweep) / "runs").iterdir() if (p / "metrics.jsonl").is_file())
    if not runs:
        raise SystemExit(f"{sweep}/runs: no run with a metrics.jsonl")
    tables = [run_table(r) for r in runs]
    cols = ("k", "steps", "first_step_s", "step_s", "generate_s", "reward_wait_s", "reward_wall_s", "logprobs_s",
            "train_s", "trainer_wait_s", "gen_tok_per_s_of_step", "trainer_peak_gib")
    print(" | ".join(cols))
    for t in tables:
        print(" | ".join(_fmt(t[c]) if not isinstance(t[c], int) else str(t[c]) for c in cols))
    for t in tables:
        b, a = t["before"], t["after"]
        print(f"k={t['k']}: held-out (greedy) SFT step {t['before_step']}: score {_fmt(b.get('score'))}, resolved "
              f"{_fmt(b.get('resolved_rate'), '.3f')}, format {_fmt(b.get('format_rate'), '.3f')} -> GRPO step "
              f"{t['after_step']}: score {_fmt(a.get('score'))}, resolved {_fmt(a.get('resolved_rate'), '.3f')}, "
              f"format {_fmt(a.get('format_rate'), '.3f')}; train reward {_fmt(t['reward_mean_first5'], '.3f')} "
              f"(first 5 steps) -> {_fmt(t['reward_mean_last5'], '.3f')} (last 5); eval {_fmt(t['eval_s'])} s")
    peaks = peak_by_role(memory) if memory and pathlib.Path(memory).is_file() else {}
    if peaks:
        print("driver's peak per role (GiB): " + ", ".join(f"{r} {g:.2f}" for r, g in sorted(peaks.items())))
    print(json.dumps({"runs": tables, "driver_peak_gib": peaks}, default=str))


def main() -> None:
    """`watch CSV` or `report SWEEP_DIR [--memory CSV]`."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    w.add_argument("csv")
    r = sub.add_parser("report")
    r.add_argument("sweep")
    r.add_argument("--memory", default="")
    args = p.parse_args()
    if args.cmd == "watch":
        try:
            watch(args.csv)
        except KeyboardInterrupt:
            sys.exit(0)
    else:
        report(args.sweep, args.memory)


if __name__ == "__main__":
    main()
