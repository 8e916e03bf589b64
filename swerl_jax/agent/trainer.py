"""The agent's GRPO collector (rl.task = "agent"): multi-turn episodes in sandboxed repositories, GRPO++ updates.

    python -m swerl_jax.train --config=experiments/agent_tiny_cpu.py      # SFT on scripted episodes, then GRPO

`AgentCollector` is how an agent run collects a step (`swerl_jax.rl.collector.Collector`; `rl.build` hands it to
the one GRPO trainer, with its `evaluate` as the trainer's evaluator): the Grain loader yields task indices
(`rl.prompts_per_step` per step, seeded shuffle, per-process shards, checkpointed); each task is run as
`rl.num_samples` episodes (`agent.rollout.run_episodes`: the sampler continues each conversation turn by turn,
environments step in a thread pool), the environment's final reward (hidden tests, or the SWE-RL similarity of the
diff) scores each episode, and the rows' loss mask covers the model's own tokens only (`Rollout.token_mask`).
Episodes whose environment failed are excluded from their group's baseline. With agent.stream_ahead_batches >= 1
(and rl.max_staleness >= 1) the episodes stream across steps instead (`agent.stream.EpisodeStream`): a step takes
the first P groups to finish, the others carry on under newer policies, and agent/stream_* counts the groups
carried, dropped (older than the staleness bound) and in flight. Everything after collection
(advantages, compact filtering, the clipped update, publishing, metrics, checkpoints) is `GRPOTrainer`'s.

Metrics on top of GRPO's: agent/turns_mean, agent/tool_error_rate (tool errors / turns), agent/termination/<why>
(finish, max_turns, max_context, timeout, env_error), agent/resolved_rate, agent/tampered_rate,
agent/log_only_resolved_rate, agent/resolved_test_infra_rate (of the
episodes whose tests passed, those whose patch changes how tests run), agent/model_tokens_mean, and the
time split time/generate_s vs time/env_wait_s (environment time not hidden behind generation) and
time/env_busy_s (all environment time); with agent.error_credit = "until_error", agent/credit_masked_tokens and
agent/credit_masked_episodes; with eval.every_steps, eval/resolved_rate of greedy episodes on held-out
tasks (synthetic, or agent.eval_instances: a generated set's held-out split), their rows in WORKDIR/eval_rollouts/.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import time
from typing import Any

import grain
import numpy as np

from swerl_jax import sharding
from swerl_jax.agent.env import TERMINATIONS
from swerl_jax.agent.rollout import SYSTEM, ChatFormat, Reprefill, TurnGenerator, run_episodes
from swerl_jax.agent.stream import EpisodeStream
from swerl_jax.agent.tasks import AgentTasks
from swerl_jax.config import rl_seed
from swerl_jax.rl.collect import draw_seed
from swerl_jax.rl.collector import Collector, Groups, Sampler, local_prompts
from swerl_jax.rl.rollouts import Rollout, RolloutGroups, flatten_groups
from swerl_jax.sampler.sessions import KeptKV
from swerl_jax.sampler.types import SamplingParams, sampling_params
from swerl_jax.tokenizer import tokenizer_for


def task_iterator(num_tasks: int, batch_size: int, seed: int, process_index: int = 0, process_count: int = 1):
    """A Grain iterator of task-index batches: this process's strided shard, reshuffled each epoch, forever."""
    if num_tasks < 1:
        raise ValueError("no agent tasks (data.synthetic_num_records / agent.instances / data.rl_num_records)")
    ds = grain.MapDataset.range(num_tasks)[process_index::process_count]
    if len(ds) == 0:
        raise ValueError(f"{num_tasks} agent tasks leave process {process_index} of {process_count} none")
    # batch after to_iter_dataset: a MapDataset batch of 1 over an endless repeat overflows its length
    return iter(ds.shuffle(seed=seed).repeat(None).to_iter_dataset().batch(batch_size))


class AgentCollector(Collector):
    """A step's episodes: the next task batch, rl.num_samples episodes each, scored by their environments."""

    def __init__(self, config: Any, workdir: str | pathlib.Path) -> None:
        """Build the run's tasks (and, with eval.every_steps on process 0, the held-out ones) and the environment
        pool; nothing runs yet."""
        import jax

        self.config = config
        a = config.agent
        self.num_samples = int(config.rl.num_samples)
        self.sampling = sampling_params(config)
        self.completion_cap = int(a.max_context)  # a row's completion is the whole transcript after the task
        self.workdir = pathlib.Path(workdir)
        self.tasks = AgentTasks.from_config(config, workdir)
        self.data_iter = task_iterator(len(self.tasks.instances), local_prompts(config), rl_seed(config),
                                       jax.process_index(), jax.process_count())
        self.tokenizer = tokenizer_for(config.model)
        self.chat = ChatFormat(self.tokenizer)
        self.pool = concurrent.futures.ThreadPoolExecutor(int(a.env_workers), thread_name_prefix="agent-env")
        self.heldout = (AgentTasks.from_config(config, workdir, heldout=True)
                        if int(config.eval.every_steps) > 0 and sharding.is_main_process() else None)
        self.stream = None
        if int(a.stream_ahead_batches) > 0:  # episodes across steps: a step takes the first groups to finish
            self.stream = EpisodeStream(self.chat, SYSTEM, self.sampling, num_samples=self.num_samples,
                                        ahead_batches=int(a.stream_ahead_batches), max_context=int(a.max_context),
                                        seed=rl_seed(config), pool=self.pool)
        self.max_staleness = int(config.rl.max_staleness)

    def generator(self, sampler: Sampler) -> TurnGenerator:
        """How turns are sampled: re-prefill through the trainer's sampler, or kept K/V (agent.kv_cache)."""
        if str(self.config.agent.kv_cache) == "kept":
            return KeptKV.for_sampler(sampler, self.config)
        return Reprefill(sampler, self.tokenizer)

    def episodes(self, sampler: Sampler, instances: list[dict], samples: int, sampling: SamplingParams, step: int,
                 version: int, tasks: AgentTasks, draw: int = 0) -> tuple[RolloutGroups, Any]:
        """`samples` episodes of each instance with the sampler's policy `version` (seeded by step's `draw`)."""
        envs = [[tasks.env(inst, self.config) for _ in range(samples)] for inst in instances]
        a = self.config.agent
        return run_episodes(envs, self.generator(sampler), self.chat, SYSTEM, sampling,
                            max_context=int(a.max_context), seed=draw_seed(rl_seed(self.config), draw), step=step,
                            policy_version=version, pool=self.pool, waves=int(a.waves))

    def _draw(self) -> list[dict]:
        return [self.tasks.instances[int(i)] for i in np.asarray(next(self.data_iter)).reshape(-1)]

    def collect(self, sampler: Sampler, step: int, policy_version: int, draw: int = 0) -> Groups:
        """Step `step`'s (extra draw `draw`'s) scored episodes [P][G]; an episode whose environment failed is
        `excluded`."""
        stream_metrics: dict[str, float] = {}
        t0 = time.perf_counter()
        if self.stream is not None and draw:
            raise ValueError("rl.dynamic_sampling does not combine with agent.stream_ahead_batches > 0 (a streamed "
                             "step takes the first groups to finish); set one of them off")
        if self.stream is not None:  # the first P groups of the stream to finish (draws inside, timed with it)
            t_data = 0.0
            rollouts, times, stream_metrics = self.stream.collect(
                self.generator(sampler), self._draw,
                lambda inst: [self.tasks.env(inst, self.config) for _ in range(self.num_samples)], step,
                policy_version, min_version=step - 1 - self.max_staleness)
        else:
            instances = self._draw()
            t_data = time.perf_counter() - t0
            rollouts, times = self.episodes(sampler, instances, self.num_samples, self.sampling, step,
                                            policy_version, self.tasks, draw)
        excluded = np.zeros((len(rollouts), self.num_samples), bool)
        for p, group in enumerate(rollouts):
            for r in group:
                excluded[p, r.sample] = r.termination == "env_error"
        return Groups.scored(rollouts, self.num_samples, excluded=excluded if excluded.any() else None,
                             times={"data_s": t_data, "generate_s": times.generate_s, "env_wait_s": times.env_wait_s,
                                    "env_busy_s": times.env_busy_s, "reward_s": times.reward_s},
                             metrics=episode_metrics(flatten_groups(rollouts)) | stream_metrics)

    def state_dict(self) -> dict:
        """With the stream: the instance ids of the tasks in flight after the last collect (a resumed run starts
        them again, `EpisodeStream.restart`: no drawn task is lost)."""
        return {} if self.stream is None else {"stream_in_flight": [str(i["instance_id"])
                                                                    for i in self.stream.in_flight()]}

    def load_state_dict(self, state: dict) -> None:
        """Start the checkpoint's tasks in flight again (needs the stream on, as when it was saved)."""
        ids = list(state.get("stream_in_flight", []))
        if not ids:
            return
        by_id = {str(i["instance_id"]): i for i in self.tasks.instances}
        if self.stream is None or any(i not in by_id for i in ids):
            lacks = "no stream (agent.stream_ahead_batches=0)" if self.stream is None else "not all of them as tasks"
            raise ValueError(f"the checkpoint has {len(ids)} agent tasks in flight to start again (first "
                             f"{ids[0]!r}) but this run has {lacks}")
        self.stream.restart([by_id[i] for i in ids])

    def credit(self, groups: Groups, advantages: np.ndarray) -> tuple[np.ndarray | None, dict[str, float]]:
        """agent.error_credit = "until_error": see `mask_after_first_error`; "episode": every model token."""
        if str(self.config.agent.error_credit) != "until_error":
            return None, {}
        return mask_after_first_error(groups.rollouts, advantages)

    def evaluate(self, sampler: Sampler, version: int) -> dict:
        """The evaluator of an agent run: greedy episodes of policy `version` on the held-out tasks (synthetic, or
        agent.eval_instances), eval/resolved_rate and friends ({} but on process 0 with eval.every_steps); the
        episodes' rows go to WORKDIR/eval_rollouts/step_XXXXXX.jsonl, so the rates can be recounted."""
        if self.heldout is None:
            return {}
        greedy = dataclasses.replace(self.sampling, temperature=0.0)
        groups, _ = self.episodes(sampler, self.heldout.instances, 1, greedy, 10**6 + version, version,
                                  self.heldout)
        rollouts = flatten_groups(groups)
        write_eval_rollouts(self.workdir, version, rollouts)
        m = episode_metrics(rollouts)
        return {f"eval/{k.split('/', 1)[1]}": v for k, v in m.items()} | {"eval/episodes": len(groups)}

    def close(self) -> None:
        """Close the episodes still streaming, then stop the environment pool."""
        if self.stream is not None:
            self.stream.close()
        self.pool.shutdown(wait=True, cancel_futures=True)


EVAL_ROLLOUTS_DIR = "eval_rollouts"


def write_eval_rollouts(workdir: str | pathlib.Path, version: int, rollouts: list[Rollout]) -> pathlib.Path:
    """WORKDIR/eval_rollouts/step_XXXXXX.jsonl: one row per held-out episode of policy `version` (the training
    rollouts' row, advantage 0: no update reads them), written whole (write, then rename)."""
    path = pathlib.Path(workdir) / EVAL_ROLLOUTS_DIR / f"step_{int(version):06d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r.to_json(version, 0.0), default=str) + "\n" for r in rollouts))
    os.replace(tmp, path)
    return path


def episode_metrics(rollouts: list) -> dict[str, float]:
    """agent/* metrics of scored episodes: turns, tool errors, terminations, resolution, model tokens."""
    n = max(1, len(rollouts))
    turns = np.asarray([r.reward_info.get("turns", 0) for r in rollouts] or [0], np.float64)
    errors = sum(r.reward_info.get("tool_errors", 0) for r in rollouts)
    out = {"agent/turns_mean": float(turns.mean()), "agent/turns_max": float(turns.max()),
           "agent/tool_error_rate": errors / max(1.0, float(turns.sum())),
           "agent/resolved_rate": sum(r.reward >= 1.0 for r in rollouts) / n,
           # of the episodes the tests resolved, those whose patch changes how tests run (scored 0 with
           # agent.test_infra_unresolved): a rising rate is the policy learning the grader, not the fix
           "agent/resolved_test_infra_rate": _test_infra_rate(rollouts),
           # the trusted plugin's verdicts (sandbox/pytest_verdict.py): episodes whose run changed pytest's
           # machinery (scored 0), and episodes pytest's log called resolved but the record did not (printed
           # results, an early exit): either rising is the policy attacking the grader
           "agent/tampered_rate": sum(r.reward_info.get("status") == "tampered" for r in rollouts) / n,
           "agent/log_only_resolved_rate": sum(bool(r.reward_info.get("log_resolved")) and r.reward < 1.0
                                               for r in rollouts) / n,
           "agent/model_tokens_mean": float(np.mean([r.token_mask.sum() if r.token_mask is not None else 0
                                                     for r in rollouts] or [0]))}
    for why in (*TERMINATIONS, "env_error"):
        out[f"agent/termination/{why}"] = sum(r.termination == why for r in rollouts) / n
    return out


def _test_infra_rate(rollouts: list) -> float:
    resolved = [r for r in rollouts if r.reward_info.get("tests_resolved", r.reward >= 1.0)]
    return sum(bool(r.reward_info.get("test_infra_paths")) for r in resolved) / max(1, len(resolved))


def mask_after_first_error(groups: RolloutGroups, advantages: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """Where a below-baseline episode's credit ends: after the turn whose tool call failed first.

    The failing turn keeps its negative advantage (it holds the slip: a wrong token in a call); what the model
    wrote after it is conditioned on an error observation the policy rarely produces and was not the cause of the
    failure, and at a sharp policy those off-distribution tokens carry the largest log-prob gradients, drowning
    the slip's. Episodes at or above their group's baseline keep every token (a recovered error is part of what
    is reinforced). Nothing is changed: returns credit_end [P, G] (completion tokens from there on leave the loss;
    `rollouts.build_train_batch`), agent/credit_masked_tokens (the fraction of model tokens dropped) and
    agent/credit_masked_episodes.
    """
    width = max((len(r.completion_tokens) for group in groups for r in group), default=0)
    ends = np.full(np.shape(advantages), width, np.int64)
    total = dropped = episodes = 0
    rollouts: list[Rollout] = flatten_groups(groups)
    for p, group in enumerate(groups):
        for r in group:
            if r.token_mask is None:
                continue
            total += float(r.token_mask.sum())
            cut_at = r.reward_info.get("first_error_end")
            if advantages[p, r.sample] >= 0 or cut_at is None or cut_at >= len(r.token_mask):
                continue
            dropped += float(r.token_mask[int(cut_at):].sum())
            ends[p, r.sample] = int(cut_at)
            episodes += 1
    return ends, {"agent/credit_masked_tokens": dropped / max(1.0, total),
                  "agent/credit_masked_episodes": episodes / max(1, len(rollouts))}
