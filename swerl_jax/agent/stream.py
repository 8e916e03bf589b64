"""Agent episodes streamed across steps (`agent.stream_ahead_batches` = B >= 1, with `rl.max_staleness` >= 1): a
step trains on the first P groups to finish, so the slowest episode of a batch does not hold the step.

    stream = EpisodeStream(chat, SYSTEM, sampling, num_samples=G, ahead_batches=1, max_context=..., seed=s,
                           pool=pool)
    groups, times, metrics = stream.collect(generator, draw, make_envs, step, version, min_version)

The synchronous agent collector (`rollout.run_episodes`) runs a step's P x G episodes to their end, so the step
lasts as long as its longest episode. The stream instead keeps about (1 + B) x P groups in flight. Each `collect`:
  1. ends the groups whose first model turn is older than `min_version` (= step - 1 - rl.max_staleness: trained
     now they would break the staleness bound; `agent/stream_dropped`, their environments closed, not scored);
  2. tops the stream up with new task batches from `draw()` (P tasks each, the task iterator's batches, so the data
     position the trainer checkpoints is the one after the last batch drawn);
  3. runs turns over every live episode in lock-step (new groups' first turns in one request, the others' next
     turns in another, with min_policy_version = `version`), until P groups have every episode ended;
  4. scores those P and returns them in the order they finished (ties: the order they started); a group that
     finished beyond the P waits, done, for the next step.
Groups still running carry over, and their next turns come from whatever newer policy the sampler then serves:
an episode can span versions (a partial rollout). Every model token keeps the behaviour log-prob of the version
that sampled it, which is what the ratio is taken against (`rl.off_policy`), and a rollout's `policy_version` is
its first model turn's, so `staleness` counts an episode by its oldest tokens: at most rl.max_staleness.

Seeds: request r of a collect (r = 2 x turn + 0 for first turns, + 1 for next turns) uses
`rollout_seed(seed, step, r)`, so given the versions served a run collects the same episodes.

Resume loses no prompt: the episodes in flight are not checkpointed, but their tasks are (`in_flight`, taken
after each collect and saved with that step's checkpoint). A run resumed from step s starts those tasks again
first (`restart`: their episodes regenerated from the first turn, counted in `agent/stream_regenerated_groups`)
and then draws from the checkpointed data position, which is past them. So every task drawn up to the last step
is trained exactly once, or dropped for staleness and counted (streaming is refused at rl.max_staleness = 0).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.rollout import (
    ChatFormat,
    Conversation,
    EpisodeTimes,
    TurnGenerator,
    add_turn,
    apply_steps,
    reset_episode,
    score_episode,
    step_episode,
    to_rollout,
)
from swerl_jax.rl.collect import rollout_seed
from swerl_jax.rl.rollouts import RolloutGroups
from swerl_jax.sampler.types import SamplingParams


@dataclasses.dataclass
class StreamGroup:
    """One task's G episodes in flight."""

    convs: list[Conversation]
    instance: dict  # the task: what a resumed run starts again if the group was in flight at its checkpoint
    started_step: int  # the step whose collection started it
    started_version: int  # the min_policy_version its first turn was asked for
    turns: int = 0  # model turns generated so far
    finished_at: int = -1  # over the stream's life: when its last episode ended (-1: running)

    @property
    def done(self) -> bool:
        """Every episode of the group has ended."""
        return all(c.done for c in self.convs)

    @property
    def oldest_version(self) -> int:
        """The oldest policy version among its model turns (the asked one before any turn)."""
        seen = [c.first_version for c in self.convs if c.first_version >= 0]
        return min(seen) if seen else self.started_version


class EpisodeStream:
    """Agent episodes in flight across steps; `collect` hands over a step's P finished groups."""

    def __init__(self, chat: ChatFormat, system: str, sampling: SamplingParams, *, num_samples: int,
                 ahead_batches: int, max_context: int, seed: int, pool: concurrent.futures.Executor,
                 min_turn_tokens: int = 16) -> None:
        """Stream `num_samples` episodes per task, keeping `ahead_batches` task batches in flight beyond the
        step's own; `pool` steps the environments."""
        if ahead_batches < 1:
            raise ValueError(f"agent.stream_ahead_batches={ahead_batches}: the stream is for >= 1 (0: no stream)")
        self.chat, self.system, self.sampling = chat, system, sampling
        self.num_samples, self.ahead = int(num_samples), int(ahead_batches)
        self.max_context, self.seed, self.pool = int(max_context), int(seed), pool
        self.min_turn_tokens = int(min_turn_tokens)
        self.groups: list[StreamGroup] = []
        self._restart: list[dict] = []  # a resumed run's tasks that were in flight at its checkpoint
        self._batch = 0  # P, from the first batch drawn
        self._finished = 0

    def _drop_stale(self, min_version: int) -> int:
        keep, dropped = [], 0
        for g in self.groups:
            if g.oldest_version >= min_version:
                keep.append(g)
                continue
            dropped += 1
            for c in g.convs:
                try:
                    c.env.close()
                except Exception:  # noqa: BLE001 - closing a sandbox is best effort; it is discarded anyway
                    pass
        self.groups = keep
        return dropped

    def _top_up(self, draw: Callable[[], Sequence[dict]], make_envs: Callable[[dict], list[SWEEnv]], step: int,
                version: int, times: EpisodeTimes) -> None:
        new: list[StreamGroup] = []
        restarted, self._restart = self._restart, []  # before any draw: the data position is past them
        while restarted or not self._batch or len(self.groups) + len(new) < (1 + self.ahead) * self._batch:
            instances = restarted or list(draw())
            if not instances:
                raise ValueError("the agent task iterator gave an empty batch")
            if not restarted:
                self._batch = self._batch or len(instances)
            restarted = []
            for inst in instances:
                convs = [Conversation(env, -1, g) for g, env in enumerate(make_envs(inst))]
                new.append(StreamGroup(convs, inst, step, version))
        flat = [c for g in new for c in g.convs]
        t0 = time.perf_counter()
        tasks = list(self.pool.map(reset_episode, flat))
        times.env_wait_s += time.perf_counter() - t0
        for c, task in zip(flat, tasks):
            if isinstance(task, Exception):
                c.done, c.termination, c.error = True, "env_error", str(task)
            else:
                c.prompt = self.chat.prompt(self.system, task)
        self.groups += new

    def _mark_finished(self) -> None:
        for g in self.groups:  # kept in start order: ties finish in the order they started
            if g.finished_at < 0 and g.done:
                g.finished_at = self._finished
                self._finished += 1

    def _turn(self, generator: TurnGenerator, step: int, turn: int, version: int, times: EpisodeTimes) -> None:
        """One model turn of every live episode, then its environment step."""
        firsts = [g for g in self.groups if g.turns == 0 and not g.done]
        nexts = [c for g in self.groups if g.turns > 0 for c in g.convs if not c.done]
        completions = {}
        t0 = time.perf_counter()
        if firsts:
            prompts = [next(c for c in g.convs if not c.done).prompt for g in firsts]
            got = generator.first_turn(prompts, self.num_samples, self.sampling,
                                       rollout_seed(self.seed, step, 2 * turn), version)
            completions.update({id(c): got[i][c.sample] for i, g in enumerate(firsts) for c in g.convs})
        if nexts:
            caps = [min(self.sampling.max_new_tokens, self.max_context - len(c.prompt) - len(c.tokens))
                    for c in nexts]
            got = generator.next_turn([c.context() for c in nexts], caps, self.sampling,
                                      rollout_seed(self.seed, step, 2 * turn + 1), version)
            completions.update({id(c): got[i] for i, c in enumerate(nexts)})
        times.generate_s += time.perf_counter() - t0
        futures = []
        for g in self.groups:
            live = [c for c in g.convs if not c.done]
            if not live:
                continue
            g.turns += 1
            for c in live:
                add_turn(c, completions[id(c)])
                futures.append(self.pool.submit(step_episode, c, completions[id(c)], self.chat.tokenizer))
        t0 = time.perf_counter()
        apply_steps(futures, self.chat, self.max_context, self.min_turn_tokens)
        times.env_wait_s += time.perf_counter() - t0

    def collect(self, generator: TurnGenerator, draw: Callable[[], Sequence[dict]],
                make_envs: Callable[[dict], list[SWEEnv]], step: int, version: int,
                min_version: int) -> tuple[RolloutGroups, EpisodeTimes, dict[str, float]]:
        """Step `step`'s P = len(draw()) groups, the first to finish, scored [P][G] (see the module docstring);
        `version` is the newest published policy, `min_version` the oldest a trained token may come from."""
        times = EpisodeTimes()
        regenerated = len(self._restart)
        dropped = self._drop_stale(min_version)
        self._top_up(draw, make_envs, step, version, times)  # P: the size of the iterator's batches
        batch = self._batch
        self._mark_finished()
        turn = 0
        while sum(g.finished_at >= 0 for g in self.groups) < batch:
            if all(g.done for g in self.groups):  # cannot happen: every group in flight ends or runs
                raise RuntimeError(f"agent stream: {len(self.groups)} groups in flight, none running, fewer than "
                                   f"{batch} finished")
            self._turn(generator, step, turn, version, times)
            self._mark_finished()
            turn += 1
        ready = sorted((g for g in self.groups if g.finished_at >= 0), key=lambda g: g.finished_at)[:batch]
        self.groups = [g for g in self.groups if g not in ready]
        flat = [c for g in ready for c in g.convs]
        t0 = time.perf_counter()
        scored = list(self.pool.map(score_episode, flat))
        times.reward_s = time.perf_counter() - t0
        times.env_busy_s = sum(c.env.stats.env_seconds for c in flat if c.env.stats)
        out: RolloutGroups = []
        for p, g in enumerate(ready):
            for c in g.convs:
                c.group = p
            out.append([to_rollout(c, self.chat, scored[flat.index(c)]) for c in g.convs])
        spans = [len({c.first_version, c.policy_version}) for c in flat if c.first_version >= 0]
        metrics = {"agent/stream_dropped_groups": float(dropped), "agent/stream_regenerated_groups": float(regenerated),
                   "agent/stream_carried_groups": float(sum(g.started_step < step for g in ready)),
                   "agent/stream_inflight_groups": float(len(self.groups)),
                   "agent/stream_multi_version_frac": float(np.mean([s > 1 for s in spans])) if spans else 0.0}
        return out, times, metrics

    def in_flight(self) -> list[dict]:
        """The tasks of the groups in flight (running, or finished and waiting for a step), in start order: what
        a run resumed from the step just collected must start again (`restart`)."""
        return self._restart + [g.instance for g in self.groups]

    def restart(self, instances: Sequence[dict]) -> None:
        """Start `instances` again, before anything is drawn, at the next `collect` (a resumed run: the tasks in
        flight at its checkpoint; their episodes are regenerated from the first turn)."""
        if self.groups:
            raise RuntimeError("agent stream: restart() is for a fresh stream (a resumed run), this one has groups")
        self._restart = list(instances)

    def close(self) -> None:
        """Close the environments of every episode still in flight."""
        self._drop_stale(min_version=2**62)
