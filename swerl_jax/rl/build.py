"""The GRPO trainer of an experiment config, wired: the collector its task needs and the evaluator eval.* asks for.

    trainer = build_grpo_trainer(config, workdir, initial_params=sft_params)   # what `swerl_jax.train` runs
    summary = trainer.run()

rl.task = "repair" (SWE-RL): `rl.collect.RepairCollector` (the Grain loader, the sampler, the reward service) and,
with eval.every_steps > 0, `RepairEvaluator` (the held-out repair metric, `eval.repair_score`). rl.task = "agent"
(DeepSWE): `agent.trainer.AgentCollector` (tasks, sandboxed environments, the sampler turn by turn) and its greedy
held-out episodes. The trainer (`rl.trainer.GRPOTrainer`) imports neither evaluation nor the agent: this module
is where they meet it, as levanter's entry points add their eval hooks to the trainer they build.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from swerl_jax import sharding
from swerl_jax.resolve import ensure_resolved
from swerl_jax.rl.collect import RepairCollector
from swerl_jax.rl.collector import Collector, Evaluator, Sampler, local_prompts
from swerl_jax.rl.dynamic import DynamicSampling
from swerl_jax.rl.heldout import heldout_records, repair_score, write_answer_rows
from swerl_jax.rl.trainer import GRPOTrainer
from swerl_jax.sampler.types import sampling_params
from swerl_jax.tokenizer import tokenizer_for


class RepairEvaluator:
    """The repair metric of a sampler's policy on held-out records, greedy (`eval.repair_score`): eval/format_rate,
    eval/score, eval/exact_rate, eval/mean_reward, eval/answers (and eval/resolved_rate: records with hidden
    tests). An `Evaluator`. With `rows_dir`, each evaluation's per-answer rows (instance_id, reward, format_error,
    resolved, answer) go to `rows_dir/heldout_VVVVVV.jsonl` (V: the policy version): what a paired per-task
    comparison of two runs on the same held-out tasks needs."""

    def __init__(self, config: Any, records: list[dict], rows_dir: pathlib.Path | None = None) -> None:
        """Evaluate on `records` (`rl.heldout.heldout_records`: records the run never trains on)."""
        self.config, self.records, self.rows_dir = config, records, rows_dir
        self.greedy = dataclasses.replace(sampling_params(config), temperature=0.0)

    def __call__(self, sampler: Sampler, version: int) -> dict:
        """The metric of policy `version` (or newer) served by `sampler`; {} without records."""
        if not self.records:
            return {}
        chunk = max(1, int(self.config.sampler.max_batch))

        def generate(prompts: list) -> list[list[str]]:
            out = []
            for start in range(0, len(prompts), chunk):
                groups = sampler.generate(prompts[start:start + chunk], self.greedy, num_samples=1, seed=0,
                                          min_policy_version=version)
                out += [[c.text or "" for c in group] for group in groups]
            return out

        d, rows = self.config.data, []
        result = repair_score(self.records, generate, tokenizer_for(self.config.model), d.max_prompt_len,
                              d.prompt_style, self.config.eval.reward_kind, rows)
        if self.rows_dir is not None:
            write_answer_rows(self.rows_dir / f"heldout_{version:06d}.jsonl", rows)
        return result.metrics()


def build_collector(config: Any, workdir: str | pathlib.Path) -> tuple[Collector, Evaluator | None]:
    """The collector of `config`'s rl.task and its evaluator (None when eval.every_steps is 0 or, as held-out
    evaluation runs on process 0 only, on the other processes)."""
    evaluate = int(config.eval.every_steps) > 0 and sharding.is_main_process()
    if str(config.rl.task) == "agent":  # imported only then: it brings the sandbox and the tools
        from swerl_jax.agent.trainer import AgentCollector

        agent = AgentCollector(config, workdir)
        return agent, agent.evaluate if evaluate else None
    evaluator = RepairEvaluator(config, heldout_records(config), pathlib.Path(workdir) / "eval") if evaluate else None
    return RepairCollector(config), evaluator


def build_grpo_trainer(config: Any, workdir: str | pathlib.Path, initial_params: Any = None) -> GRPOTrainer:
    """The GRPO trainer of `config` (resolved here unless it is already) with its collector and evaluator;
    `initial_params` (e.g. the SFT stage's) replace model.hf_dir."""
    config = ensure_resolved(config)  # a bad key fails here, before a worker starts or anything compiles
    collector, evaluator = build_collector(config, workdir)
    rl = config.rl
    try:
        if bool(rl.dynamic_sampling):  # fill each step with groups that carry a signal (DAPO)
            collector = DynamicSampling(collector, local_prompts(config), int(rl.dynamic_sampling_max_draws),
                                        exclude_truncated=bool(rl.compact_filtering and rl.baseline_excludes_filtered))
        return GRPOTrainer(config, workdir, collector, evaluator, initial_params=initial_params)
    except BaseException:
        collector.close()
        raise
