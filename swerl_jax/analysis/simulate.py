"""A run workdir for the notebooks: a real tiny_cpu training run, or a simulated one when no trainer exists.

`simulate_run` writes the trainer's workdir format (metrics.jsonl + rollouts/step_XXXXXX.jsonl) from a
scripted "policy" over synthetic PR records: each completion is the record's gold SWE-RL answer after
random damage (character edits, truncation, a lost thought, prose instead of edit blocks, a broken SEARCH
text), damaged less as steps advance. Every reward, format-error reason and advantage in it is computed
by the real reward functions and the trainer's advantage estimator; only the completions are scripted,
and no KL or timing is logged (there is no model). `ensure_run` picks a given workdir, a fresh tiny_cpu
run (when `swerl_jax.train` exists) or a simulated run.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import random
import subprocess
import sys
import tempfile

import numpy as np

from swerl_jax.analysis.advantages import compute_advantages, step_groups, zero_variance_fraction
from swerl_jax.analysis.edits import perturb_answer
from swerl_jax.answer import ANSWER_END, ANSWER_START, THINK_END, THINK_START
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.reward import calculate_search_replace_reward, compact_info
from swerl_jax.runs.metrics import METRICS_FILE, ROLLOUTS_DIR, MetricsWriter

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DAMAGE_KINDS = ("edits", "truncate", "drop_thought", "prose", "search_edit")


def _damage(gold: str, kind: str, strength: float, rng: random.Random) -> tuple[str, bool]:
    """(completion, truncated) for one damage kind; `strength` in [0, 1] scales how much is broken."""
    if kind == "edits":
        k = int(rng.expovariate(1.0) * 24 * strength)
        return perturb_answer(gold, k, rng, unit="char", region="replace")[0], False
    if kind == "truncate":
        # As if max_new_tokens ran out: the closing tags are lost.
        return gold[: rng.randrange(len(gold) // 4, len(gold) - len(ANSWER_END))], True
    if kind == "drop_thought":
        start, end = gold.index(THINK_START) + len(THINK_START), gold.index(THINK_END)
        return gold[:start] + "\n" + gold[end:], False
    if kind == "prose":
        head = gold[: gold.index(ANSWER_START) + len(ANSWER_START)]
        return head + f"\nChange the condition so that the function returns the right value.\n{ANSWER_END}", False
    return perturb_answer(gold, max(1, int(8 * strength)), rng, unit="char", region="search")[0], False


def simulate_rollouts(
    records: list[dict], num_steps: int, prompts_per_step: int, num_samples: int, seed: int = 0
) -> dict[int, list[dict]]:
    """{step: rollout rows} of a scripted policy that damages the gold answer less as training goes on."""
    if not records:
        raise ValueError("simulate_rollouts needs at least one record")
    rng = random.Random(seed)
    golds = {r["instance_id"]: oracle_solution(r) for r in records}
    out = {}
    for step in range(1, num_steps + 1):
        progress = (step - 1) / max(1, num_steps - 1)
        p_malformed = 0.5 - 0.4 * progress  # format errors fade as the "policy" learns the format
        rows = []
        for group in range(prompts_per_step):
            record = records[rng.randrange(len(records))]
            gold = golds[record["instance_id"]]
            # Some groups collapse onto one answer (all samples alike): the zero-variance case of GRPO.
            collapsed = rng.random() < 0.15 + 0.35 * progress
            shared = _damage(gold, "edits", 0.0, rng) if collapsed else None
            for sample in range(num_samples):
                if shared is not None:
                    completion, truncated = shared
                elif rng.random() < p_malformed:
                    completion, truncated = _damage(gold, rng.choice(DAMAGE_KINDS[1:]), 1 - progress, rng)
                else:
                    completion, truncated = _damage(gold, "edits", 1.0 - 0.8 * progress, rng)
                reward, info = calculate_search_replace_reward(record["code_context"], record["oracle_new_content"],
                                                               completion)
                rows.append({
                    "step": step, "prompt_id": record["instance_id"], "group": group, "sample": sample,
                    "completion": completion, "reward": reward, "advantage": None,
                    "format_error": info.get("reason") if reward < 0 else None,
                    # No tokenizer in a simulation: lengths are in characters (completion_len_unit says so).
                    "completion_len": len(completion), "completion_len_unit": "chars", "truncated": truncated,
                    "finish_reason": "length" if truncated else "stop", "reward_info": compact_info(info),
                })
        out[step] = rows
    return out


def step_metrics(step: int, rows: list[dict]) -> dict:
    """The trainer's per-step metrics that rollouts alone determine (no KL, entropy or timings)."""
    rewards = np.array([r["reward"] for r in rows], dtype=np.float64)
    advs = np.array([r["advantage"] for r in rows if r["advantage"] is not None], dtype=np.float64)
    reasons = [r["format_error"] for r in rows if r["format_error"] is not None]
    metrics = {
        "step": step, "reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()),
        "reward/min": float(rewards.min()), "reward/max": float(rewards.max()),
        "zero_var_group_frac": zero_variance_fraction(step_groups(rows))[1][0],
        "format_error_rate": len(reasons) / len(rows),
        "len/completion_mean": float(np.mean([r["completion_len"] for r in rows])),
        "truncation_rate": float(np.mean([r["truncated"] for r in rows])),
    }
    if advs.size:
        metrics["adv/mean"], metrics["adv/std"] = float(advs.mean()), float(advs.std())
    for reason in sorted(set(reasons)):
        metrics[f"format_error/{reason}"] = reasons.count(reason) / len(rows)
    return metrics


def simulate_run(
    workdir: str | os.PathLike,
    num_steps: int = 6,
    prompts_per_step: int = 4,
    num_samples: int = 8,
    seed: int = 0,
    records: list[dict] | None = None,
    advantage: str = "grpo",
) -> pathlib.Path:
    """Write a simulated run (see the module docstring) into `workdir` with `MetricsWriter`; returns its path.

    Advantages are the trainer's estimator `advantage` over each step's [P, G] groups. FileExistsError when
    `workdir` already holds a run's metrics or rollouts: the writer starts a run afresh and would delete them.
    """
    if num_steps < 1 or prompts_per_step < 1 or num_samples < 2:
        raise ValueError(f"need num_steps >= 1, prompts_per_step >= 1, num_samples >= 2; got {num_steps}, "
                         f"{prompts_per_step}, {num_samples}")
    workdir = pathlib.Path(workdir)
    # MetricsWriter opens a new run by cutting metrics.jsonl and rollouts/ to nothing: a real run there would be lost
    held = [p for p in (workdir / METRICS_FILE, workdir / ROLLOUTS_DIR) if p.exists()]
    if held:
        raise FileExistsError(f"{workdir} already holds a run ({', '.join(p.name for p in held)}): a simulated run "
                              "would replace it; give simulate_run a new folder")
    records = records if records is not None else synthetic_records(max(8, prompts_per_step * 2), seed=seed)
    # The trainer's own writer, so a simulated workdir has exactly a real run's layout.
    with MetricsWriter(workdir, total_steps=num_steps, tensorboard=False, progress=False) as writer:
        for step, rows in simulate_rollouts(records, num_steps, prompts_per_step, num_samples, seed).items():
            adv = compute_advantages(step_groups(rows)[0].rewards, advantage)
            for row in rows:
                row["advantage"] = float(adv[row["group"], row["sample"]])
            writer.write_rollouts(step, rows)
            metrics = step_metrics(step, rows)
            del metrics["step"]
            writer.write(step, metrics)
    return workdir


def trainer_available() -> bool:
    """Whether the trainer entry point `swerl_jax.train` is installed."""
    return importlib.util.find_spec("swerl_jax.train") is not None


def train_tiny_run(workdir: str | os.PathLike, num_steps: int = 3, config: str = "experiments/tiny_cpu.py",
                   extra_flags: tuple[str, ...] = (), timeout_s: float = 900.0, sft_steps: int = 40) -> pathlib.Path:
    """Run `python -m swerl_jax.train` on `config` for `num_steps` GRPO steps after `sft_steps` SFT steps (a
    short warm start: some answers well-formed, some not) into `workdir`, on one CPU device.

    Raises RuntimeError with the command and the tail of its output when training fails.
    """
    cmd = [sys.executable, "-m", "swerl_jax.train", f"--config={REPO_ROOT / config}", f"--workdir={workdir}",
           f"--config.rl.num_steps={num_steps}", f"--config.sft.num_steps={sft_steps}",
           "--config.logging.progress_bar=False", *extra_flags]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"),
               XLA_FLAGS="--xla_force_host_platform_device_count=1")
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"training failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return pathlib.Path(workdir)


def ensure_run(workdir: str = "", mode: str = "auto", num_steps: int = 3, seed: int = 0,
               root: str | os.PathLike | None = None) -> tuple[pathlib.Path, str]:
    """(workdir, how it was obtained: "given" | "trained" | "simulated") for a notebook.

    A non-empty `workdir` is used as is. Otherwise a new folder under `root` (default: the system temp
    folder) gets a run: mode "train" runs tiny_cpu for `num_steps` steps, "simulate" writes a simulated
    run, and "auto" trains when the trainer exists, else simulates.
    """
    if workdir:
        path = pathlib.Path(workdir).expanduser()
        if not path.is_dir():
            # the absolute path: a relative one is read from the kernel's folder, which may not be the user's
            raise FileNotFoundError(f"workdir={str(path.absolute())!r} does not exist")
        return path, "given"
    if mode not in ("auto", "train", "simulate"):
        raise ValueError(f"mode={mode!r}: choose auto, train or simulate")
    target = pathlib.Path(tempfile.mkdtemp(prefix="swerl_run_", dir=root))
    if mode == "train" or (mode == "auto" and trainer_available()):
        return train_tiny_run(target, num_steps=num_steps), "trained"
    return simulate_run(target, num_steps=max(num_steps, 2), seed=seed), "simulated"
