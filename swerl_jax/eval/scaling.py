"""Test-time scaling for the agent: K trajectories per instance, three selectors, DeepSWE's pass@1 / pass@K / best@K.

    python -m swerl_jax.eval.scaling --config=experiments/agent_tts.py[:cpu] --out DIR [--config.KEY=VALUE ...]

DeepSWE samples K trajectories per instance and picks one with an execution-based verifier (model-written tests),
an execution-free verifier (a model scoring the trajectory) or both (hybrid: 59.0% best@16 on SWE-bench Verified
for Qwen3-32B against 42.2% pass@1). Here:
- trajectories: `rollout.run_episodes` with the policy (K episodes of each instance in the sandboxed environment;
  each graded by the harness: `resolved` is the label, never shown to a selector);
- execution-based: Agentless's reproduction scripts written by the policy and regression tests, run on each
  trajectory's patch in the sandbox (`eval.agentless.pipeline.patch_test_results`), ranked as Agentless ranks
  (`rerank.select`: regression, then the |T|^2 x |P| reproduction consensus, then majority vote);
- execution-free: `agent.verifier` (the SFT trainer on trajectories labelled by the harness: the policy's own
  trajectories on other tasks plus scripted gold ones), the trajectory with the highest P(YES);
- hybrid: the execution filter's survivors (fewest regression failures, then the reproduction consensus), the
  verifier's best among them.
A trajectory without a patch is never selected; ties go to the earliest sample. `report.json` holds per-instance
labels, scores and choices; `report.md` the table: pass@1 (the mean resolved rate of single trajectories), pass@k
for k <= K (the unbiased estimator of Chen et al. 2021), best@K per selector.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Sequence

import numpy as np

from swerl_jax.eval.agentless import rerank
from swerl_jax.eval.agentless.pipeline import AgentlessSettings, patch_test_results
from swerl_jax.rl.rollouts import RolloutGroups

SELECTORS = ("execution", "verifier", "hybrid")


@dataclasses.dataclass
class Trajectory:
    """One graded episode: its final patch, the harness's verdict, how it ended, its transcript."""

    instance_id: str
    sample: int
    patch: str
    resolved: bool
    termination: str | None
    turns: int
    transcript: str

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def trajectories(groups: RolloutGroups) -> list[list[Trajectory]]:
    """Scored episode groups (`run_episodes`' output, execution reward) -> trajectories per instance."""
    return [[Trajectory(r.prompt_id, r.sample, str(r.reward_info.get("patch", "") or ""), r.reward >= 1.0,
                        r.termination, int(r.reward_info.get("turns", 0)), r.completion) for r in group]
            for group in groups]


# --- the execution-based verifier -------------------------------------------------------------------------------

def execution_samples(instance: dict, trajs: Sequence[Trajectory], chat, executor, settings: AgentlessSettings,
                      log_dir: pathlib.Path) -> tuple[list[rerank.Sample], dict]:
    """Each trajectory as the reranker sees it (regression failures, reproduction tests its patch resolves), from
    the policy's reproduction scripts and the regression tests run in the sandbox; and what was run."""
    info: dict = {}
    results = {}
    if any(t.patch.strip() for t in trajs):
        results = patch_test_results(instance, [{"model_patch": t.patch} for t in trajs], chat, settings, executor,
                                     log_dir, info)
    samples = [rerank.Sample(t.patch, t.patch.strip(), **results.get(t.patch, {})) if t.patch.strip()
               else rerank.Sample("", "") for t in trajs]
    return samples, info


def select_execution(samples: Sequence[rerank.Sample], settings: AgentlessSettings, ran: bool) -> int | None:
    """Agentless's choice: regression, reproduction consensus, majority vote (vote alone when nothing ran)."""
    return rerank.select(list(samples), use_regression=ran and settings.regression,
                         use_reproduction=ran and settings.reproduction_tests > 0)


def select_verifier(scores: Sequence[float], trajs: Sequence[Trajectory]) -> int | None:
    """The trajectory with a patch and the highest verifier score (ties: the earliest)."""
    ids = [i for i, t in enumerate(trajs) if t.patch.strip()]
    return max(ids, key=lambda i: (scores[i], -i)) if ids else None


def select_hybrid(samples: Sequence[rerank.Sample], scores: Sequence[float], settings: AgentlessSettings,
                  ran: bool) -> int | None:
    """The verifier's best among the execution filter's survivors (fewest regression failures, then the
    reproduction consensus)."""
    ids = [i for i, s in enumerate(samples) if s.normalized.strip()]
    if not ids:
        return None
    if ran and settings.regression:
        ids = rerank.by_regression(list(samples), ids)
    if ran and settings.reproduction_tests > 0:
        ids = rerank.by_reproduction(list(samples), ids)
    return max(ids, key=lambda i: (scores[i], -i))


# --- the report -------------------------------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of n samples with c correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} of {n} samples")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def scaling_report(groups: Sequence[Sequence[Trajectory]], choices: dict[str, Sequence[int | None]]) -> dict:
    """pass@1, pass@k (k = 1..K), pass@K and best@K per selector over the instances (`choices[selector][i]` is the
    chosen trajectory of instance i, None for none: unresolved)."""
    if not groups:
        raise ValueError("no instances to report on")
    k = min(len(g) for g in groups)
    resolved = [[t.resolved for t in g] for g in groups]
    out = {"instances": len(groups), "K": k,
           "pass@k": {str(j): float(np.mean([pass_at_k(len(r), sum(r), j) for r in resolved]))
                      for j in range(1, k + 1)},
           "best@K": {}}
    out["pass@1"], out["pass@K"] = out["pass@k"]["1"], out["pass@k"][str(k)]
    for name, chosen in choices.items():
        if len(chosen) != len(groups):
            raise ValueError(f"selector {name}: {len(chosen)} choices for {len(groups)} instances")
        out["best@K"][name] = float(np.mean([c is not None and r[c] for c, r in zip(chosen, resolved)]))
    return out


def report_table(report: dict) -> str:
    """The report as a Markdown table (rates in %)."""
    k = report["K"]
    rows = [f"| instances | K | pass@1 | pass@{k} | " + " | ".join(f"best@{k} {s}" for s in report["best@K"]) + " |",
            "|---" * (4 + len(report["best@K"])) + "|",
            f"| {report['instances']} | {k} | {100 * report['pass@1']:.1f} | {100 * report['pass@K']:.1f} | "
            + " | ".join(f"{100 * v:.1f}" for v in report["best@K"].values()) + " |"]
    return "\n".join(rows) + "\n"
