"""The held-out repair metric a run evaluates itself with (the paper's oracle-file repair metric; its CLI and
its meaning: `eval.repair_score`). Training reads it here (`rl.build.RepairEvaluator`, `train.evaluate_sft`), so
training never imports evaluation: each PR record's SWE-RL prompt, the policy's answers, scored by the SWE-RL reward
(and, for records with hidden tests, run in the sandbox).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
from collections.abc import Callable, Sequence

import numpy as np

from swerl_jax.data.paths import expand_record_paths
from swerl_jax.data.prompts import prompt_or_reason
from swerl_jax.data.records import read_records
from swerl_jax.data.synthetic import config_records
from swerl_jax.reward import get_reward_fn
from swerl_jax.reward.functions import reward_pair
from swerl_jax.runs.progress import StageBar
from swerl_jax.sampler.types import SamplingParams, sampling_params

log = logging.getLogger(__name__)

# prompts (token ids) -> for each prompt, its answers (texts). `engine_generate` and `eval.repair_score`'s
# `client_generate` also take `progress=` (called with the number of prompts answered, as they come back):
# `repair_score(progress=True)` uses it
Generate = Callable[..., list[list[str]]]


@dataclasses.dataclass
class RepairScore:
    """The metric over a set of records (see the module docstring)."""

    records: int
    scored: int
    answers: int
    format_rate: float
    score: float
    mean_reward: float
    exact_rate: float
    skipped: dict[str, int]
    resolved_rate: float | None = None

    def line(self) -> str:
        """One line: what the paper's table shows, plus the counts."""
        resolved = "" if self.resolved_rate is None else f" resolved {100 * self.resolved_rate:.1f}%"
        skipped = "".join(f"; skipped {n}: {reason}" for reason, n in self.skipped.items())
        return (f"repair: format {100 * self.format_rate:.1f}% score {self.score:.1f} exact "
                f"{100 * self.exact_rate:.1f}%{resolved} ({self.answers} answers to {self.scored} of "
                f"{self.records} records{skipped})")

    def metrics(self) -> dict[str, float]:
        """The `eval/*` scalars a trainer logs (eval/resolved_rate only when the records have hidden tests)."""
        out = {"eval/format_rate": self.format_rate, "eval/score": self.score, "eval/exact_rate": self.exact_rate,
               "eval/mean_reward": self.mean_reward, "eval/answers": self.answers}
        if self.resolved_rate is not None:
            out["eval/resolved_rate"] = self.resolved_rate
        return out


def repair_score(records: Sequence[dict], generate: Generate, tokenizer, max_prompt_len: int,
                 prompt_style: str = "swe_rl", reward_kind: str = "continuous",
                 rows_out: list[dict] | None = None, progress: bool = False) -> RepairScore:
    """Prompt every record, generate, score each answer with the reward `reward_kind`; `rows_out` collects one
    dict per answer (instance_id, sample, reward, format_error, answer). `progress`: a tqdm bar on stderr through
    the stages (prompting, generating: `generate` is then called with `progress=`, scoring, hidden tests)."""
    reward_fn = get_reward_fn(reward_kind)
    bar = StageBar(progress, "repair_score")
    prompts, kept, skipped = [], [], {}
    bar.stage("prompting", len(records), "record")
    for record in records:
        bar.update(1)
        prompt, reason, detail = prompt_or_reason(record, tokenizer, max_prompt_len, prompt_style,
                                                  too_long="prompt longer than data.max_prompt_len")
        if prompt is None:  # counted with its reason, never raised (issue 57 item 1); the first of each is named
            if reason not in skipped:
                log.warning("skipping a record: %s (%s)", reason, detail)
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        prompts.append(np.asarray(prompt.ids, np.int32))
        kept.append(record)
    rewards, rows, executed = [], [], []
    answered: list[list[str]] = []
    if prompts:
        bar.stage("generating", len(prompts), "prompt")
        answered = generate(prompts, progress=bar.update) if progress else generate(prompts)
    bar.stage("scoring", sum(map(len, answered)), "answer")
    for record, answers in zip(kept, answered, strict=True):
        for sample, answer in enumerate(answers):
            bar.update(1)
            reward, info = reward_pair(reward_fn(record["code_context"], record["oracle_new_content"], answer),
                                       f"eval.reward_kind {reward_kind!r}")
            rewards.append(float(reward))
            rows.append({"instance_id": record["instance_id"], "sample": sample, "reward": float(reward),
                         "format_error": info.get("reason") if reward == -1.0 else None, "answer": answer})
            if "hidden_tests" in record:
                executed.append((len(rows) - 1, record, answer))
    if executed:
        bar.stage(f"hidden tests of {len(executed)} answers (one sandbox batch)", None, "batch")
    resolved_rate = _execute(executed, rows) if executed else None
    bar.close()
    if rows_out is not None:
        rows_out.extend(rows)
    r = np.asarray(rewards, np.float64)
    n = max(1, len(r))
    return RepairScore(records=len(records), scored=len(kept), answers=len(r),
                       format_rate=float((r != -1.0).sum() / n), score=float(100 * np.maximum(r, 0.0).sum() / n),
                       mean_reward=float(r.sum() / n), exact_rate=float((r >= 1.0).sum() / n), skipped=skipped,
                       resolved_rate=resolved_rate)


def _execute(executed: list[tuple[int, dict, str]], rows: list[dict]) -> float:
    """Run the hidden tests of every (row, record, answer) in the sandbox (batched; a malformed answer is
    unresolved without running), mark each row `resolved` / `test_status`, and return the resolved share of all
    answers to records with hidden tests."""
    from swerl_jax.testbed.hidden_tests import answer_content, run_hidden_tests_many

    contents = [answer_content(record, answer) for _, record, answer in executed]
    runnable = [k for k, content in enumerate(contents) if content is not None]
    outcomes = run_hidden_tests_many([(executed[k][1], contents[k]) for k in runnable])
    by_row = {executed[k][0]: outcome for k, outcome in zip(runnable, outcomes, strict=True)}
    for row_index, _, _ in executed:
        outcome = by_row.get(row_index)
        rows[row_index]["resolved"] = bool(outcome and outcome.resolved)
        rows[row_index]["test_status"] = outcome.status if outcome else "malformed"
    return sum(rows[i]["resolved"] for i, _, _ in executed) / len(executed)


def write_answer_rows(path: pathlib.Path, rows: list[dict]) -> None:
    """`repair_score`'s per-answer rows as JSON lines at `path` (its folder made; written to a temporary name
    first, so a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    os.replace(tmp, path)


def heldout_records(config) -> list[dict]:
    """The first `eval.num_records` records of `eval.records`, or synthetic records of seed `seed + eval.heldout_seed`
    (the training records are seed `seed`: these are instances the run never trains on)."""
    e = config.eval
    if str(e.records).strip():
        records = []
        for path in expand_record_paths(str(e.records), key="eval.records"):
            records += read_records(path)
            if len(records) >= e.num_records:
                break
        return records[:e.num_records]
    return config_records(config.data, int(e.num_records), int(config.seed) + int(e.heldout_seed), str(e.families))


def evaluate_params(config, params: dict, rows_out: list[dict] | None = None) -> dict:
    """The held-out repair metric of `params` (host arrays, the model's layout), greedy: the `eval/*` scalars the
    GRPO trainer logs every `eval.every_steps`, for a policy outside it (the SFT stage's, the RL-vs-SFT baseline).
    `rows_out` collects one row per answer (`repair_score`'s)."""
    from swerl_jax.sampler.factory import build_engine
    from swerl_jax.tokenizer import tokenizer_for

    engine = build_engine(config)
    engine.update_params(params, 0)
    greedy = dataclasses.replace(sampling_params(config), temperature=0.0)
    d = config.data
    result = repair_score(heldout_records(config), engine_generate(engine, greedy, 1), tokenizer_for(config.model),
                          d.max_prompt_len, d.prompt_style, config.eval.reward_kind, rows_out)
    return result.metrics()


def engine_generate(engine, sampling: SamplingParams, num_samples: int, seed: int = 0) -> Generate:
    """A `Generate` over an in-process `SamplingEngine`, in chunks of at most `max_batch` rows."""
    per_call = max(1, engine.max_batch // num_samples)

    def generate(prompts: list[np.ndarray], progress: Callable[[int], None] | None = None) -> list[list[str]]:
        out = []
        for start in range(0, len(prompts), per_call):
            groups = engine.generate(prompts[start:start + per_call], sampling, num_samples, seed + start)
            out += [[c.text or "" for c in group] for group in groups]
            if progress is not None:
                progress(len(groups))
        return out

    return generate
