"""Rollouts: what the sampler returned for one step, kept as [P][G] groups, and the rows the update consumes.

A step has P prompts x G samples: `collect.collect_rollouts` returns P groups of G rollouts, rewards and advantages
are [P, G] matrices over them, and `build_train_batch` packs them once into rows (row n = group n // G, sample
n % G) in `swerl_jax.batching`'s layout: the prompt left-padded to `prompt_len`, the completion right-padded to
`completion_len`. A `Rollout` is what collection made of one sample (tokens, log-probs, reward); nothing changes it
after collection: advantages and credit masks are arrays handed to `build_train_batch` and `Rollout.to_json`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from swerl_jax.batching import pack_rows, score_positions
from swerl_jax.reward.worker import FAILURE_REASONS


@dataclasses.dataclass
class Rollout:
    """One sampled completion of one prompt, with its reward once scored."""

    prompt_id: str
    group: int
    sample: int
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    sampler_logprobs: np.ndarray
    finish_reason: str  # "stop" | "length"
    completion: str
    policy_version: int = -1
    reward: float = math.nan
    reward_info: dict = dataclasses.field(default_factory=dict)
    # Multi-turn (agent) rollouts: 1 on the model's own completion tokens, 0 on observations (None: all model's),
    # and how the episode ended (finish | max_turns | max_context | timeout | env_error).
    token_mask: np.ndarray | None = None
    termination: str | None = None
    # Per completion token, the policy version that sampled it (-1 on observations); None: all `policy_version`.
    # An episode continued under newer policies (a partial rollout, `agent.stream`) spans versions.
    token_versions: np.ndarray | None = None

    @property
    def truncated(self) -> bool:
        """Compact filtering masks these: a completion that hit max_new_tokens without a stop token, or an episode
        that did not end with the agent's `finish` (max turns / context / timeout: DeepSWE's filter)."""
        if self.termination is not None:
            return self.termination != "finish"
        return self.finish_reason == "length"

    @property
    def reward_failure(self) -> str | None:
        """Why the reward service could not score this rollout (timeout, crash, exception, nonfinite,
        closed: its reward is the service's fallback), None when it was scored."""
        reason = self.reward_info.get("reason")
        return str(reason) if reason in FAILURE_REASONS else None

    @property
    def format_error(self) -> str | None:
        """The reward's format-error reason, None for a well-formed answer or one the service failed to score."""
        if self.reward >= 0 or self.reward_failure is not None:
            return None
        return str(self.reward_info.get("reason") or self.reward_info.get("type") or "format_error")

    def to_json(self, step: int, advantage: float) -> dict:
        """The rollouts/step_XXXXXX.jsonl row the notebooks read (`advantage`: the one the update gave it)."""
        return {
            "step": step, "prompt_id": self.prompt_id, "group": self.group, "sample": self.sample,
            "completion": self.completion, "reward": self.reward, "advantage": float(advantage),
            "format_error": self.format_error, "reward_failure": self.reward_failure,
            "completion_len": int(len(self.completion_tokens)),
            "truncated": self.truncated, "finish_reason": self.finish_reason,
            "policy_version": self.policy_version, "reward_info": self.reward_info,
            **({"termination": self.termination, "model_tokens": int(self.token_mask.sum())}
               if self.termination is not None and self.token_mask is not None else {}),
        }


RolloutGroups = list[list["Rollout"]]  # [P][G]: a step's rollouts, prompt by prompt, samples in order


def flatten_groups(groups: RolloutGroups) -> list[Rollout]:
    """Rows in (group, sample) order: row n is group n // G, sample n % G."""
    return [r for group in groups for r in group]


def joined_for_training(groups: RolloutGroups, credit_end: np.ndarray | None = None
                        ) -> tuple[RolloutGroups, np.ndarray | None]:
    """Multi-turn (agent) rollouts laid out for the update with their task prompt in the completion, all but its
    first token; (groups, credit_end) to hand to `build_train_batch`. Single-turn rollouts come back as they are.

    An episode holds at most agent.max_context tokens, task and transcript together, but the row layout pads
    every prompt to the batch's longest and every completion to its longest: when the longest task and the
    longest transcript are different episodes a row needs up to data.max_prompt_len + agent.max_context columns
    (64k for DeepSWE's 32k context: its sampler re-prefills whole conversations, so max_prompt_len =
    max_context). Joined, a row is at most max_context wide. The moved tokens enter with loss mask 0 and
    log-prob 0 (they are not the model's actions) and keep their RoPE positions (`positions_from_mask` counts
    from a row's first real token), so the loss and every log-prob are those of the split layout; `credit_end`
    (completion indices) moves with them. The rollouts themselves are not changed (their logs keep the episode's
    own prompt and completion).
    """
    shifted = None if credit_end is None else np.array(credit_end, copy=True)
    out = []
    for p, group in enumerate(groups):
        row = []
        for r in group:
            moved = len(r.prompt_tokens) - 1
            if r.token_mask is None or moved <= 0:
                row.append(r)
                continue
            row.append(dataclasses.replace(
                r, prompt_tokens=np.asarray(r.prompt_tokens[:1]),
                completion_tokens=np.concatenate([np.asarray(r.prompt_tokens[1:]), r.completion_tokens]),
                sampler_logprobs=np.concatenate([np.zeros(moved, np.float32), r.sampler_logprobs]),
                token_mask=np.concatenate([np.zeros(moved, np.float32), r.token_mask]),
                token_versions=None if r.token_versions is None else np.concatenate(
                    [np.full(moved, -1, np.int32), r.token_versions])))
            if shifted is not None:
                shifted[p, r.sample] += moved
        out.append(row)
    return out, shifted


def build_train_batch(groups: RolloutGroups, prompt_len: int, completion_len: int, advantages: np.ndarray,
                      credit_end: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Pack a step's [P][G] rollouts into the rows the policy update consumes (`swerl_jax.batching.pack_rows`:
    the one place prompts are padded), in (group, sample) order.

    Args:
      advantages: [P, G], each sample's advantage (`advantages.group_advantages`).
      credit_end: [P, G] int or None: completion tokens at index >= credit_end[p, g] leave the loss mask (a
        collector's `credit`, e.g. the agent's "until_error"); None keeps every token.

    Returns:
      tokens [N, prompt_len + completion_len] int32, attention_mask (same shape, bool), loss_mask [N, C] fp32
      (1 on real completion tokens; for multi-turn rollouts only on the model's own, `Rollout.token_mask`, and
      before `credit_end`), old_logp [N, C] fp32 (the sampler's log-probs, 0 on padding),
      advantages [N] fp32, truncated [N] bool; with token masks, score_positions [N, K] (`batching.score_positions`).
    """
    rollouts = flatten_groups(groups)
    advantages = np.asarray(advantages)
    if advantages.shape[0] != len(groups) or (credit_end is not None and np.shape(credit_end) != advantages.shape):
        raise ValueError(f"{len(groups)} groups, advantages {advantages.shape}, credit_end {np.shape(credit_end)}")
    for r in rollouts:  # name the rollout (pack_rows can only name the row)
        if len(r.prompt_tokens) > prompt_len or len(r.completion_tokens) > completion_len:
            raise ValueError(f"rollout {r.prompt_id}/{r.sample}: prompt {len(r.prompt_tokens)} or completion "
                             f"{len(r.completion_tokens)} tokens exceed the batch shape ({prompt_len}, "
                             f"{completion_len})")
    rows = pack_rows([r.prompt_tokens for r in rollouts], [r.completion_tokens for r in rollouts], prompt_len,
                     completion_len)
    old_logp = np.zeros((len(rollouts), completion_len), np.float32)
    where = [(p, r.sample) for p, group in enumerate(groups) for r in group]  # row -> (group, sample)
    for i, r in enumerate(rollouts):
        c = len(r.completion_tokens)
        old_logp[i, :c] = r.sampler_logprobs[:c]
        if r.token_mask is not None:  # observations and prompts between the model's turns are not its actions
            if len(r.token_mask) != c:
                raise ValueError(f"rollout {r.prompt_id}/{r.sample}: token_mask has {len(r.token_mask)} entries for "
                                 f"{c} completion tokens")
            rows["loss_mask"][i, :c] *= r.token_mask
        if credit_end is not None:
            rows["loss_mask"][i, max(0, int(credit_end[where[i]])):] = 0.0
    if any(r.token_mask is not None for r in rollouts):  # only the model's tokens go through the vocabulary
        rows["score_positions"] = score_positions(rows["loss_mask"])
    return {
        **rows,
        "old_logp": old_logp,
        "advantages": np.asarray([advantages[w] for w in where], np.float32),
        "truncated": np.asarray([r.truncated for r in rollouts], bool),
    }


def reward_matrix(groups: RolloutGroups, num_samples: int) -> np.ndarray:
    """Rewards as [P, G] in (group, sample) order; raises if a rollout is missing or unscored."""
    rewards = np.full((len(groups), num_samples), np.nan, np.float64)  # advantages are float64 host math
    for p, group in enumerate(groups):
        for r in group:
            rewards[p, r.sample] = r.reward
    if np.isnan(rewards).any():
        missing = [(int(g), int(s)) for g, s in zip(*np.nonzero(np.isnan(rewards)))]
        raise ValueError(f"rollouts without a reward (group, sample): {missing[:8]}")
    return rewards


def rollout_metrics(rollouts: list[Rollout]) -> dict[str, float]:
    """Host-side metrics of a step's scored rollouts: format errors by reason, reward failures, completion
    lengths, truncation.

    `format_error_rate` is the fraction of rollouts with a malformed answer (reward -1); `format_error/<reason>`
    splits it by the reward's reason (tag_count, no_blocks, search_not_found, ...). Rollouts the reward service
    could not score (their reward is its fallback) are not format errors: `reward_timeout_rate` counts those
    past the time limit, `reward_failure_rate` all of them, `reward_failure/<reason>` by reason (timeout,
    crash, exception, nonfinite, closed). Each is a fraction of all rollouts.
    """
    n = max(1, len(rollouts))
    reasons: dict[str, int] = {}
    failures: dict[str, int] = {}
    for r in rollouts:
        if (reason := r.format_error) is not None:
            reasons[reason] = reasons.get(reason, 0) + 1
        elif (failure := r.reward_failure) is not None:
            failures[failure] = failures.get(failure, 0) + 1
    lengths = np.asarray([len(r.completion_tokens) for r in rollouts] or [0], np.float32)
    out = {
        "format_error_rate": sum(reasons.values()) / n,
        "reward_timeout_rate": failures.get("timeout", 0) / n,
        "reward_failure_rate": sum(failures.values()) / n,
        "completion_len_mean": float(lengths.mean()),
        "completion_len_max": float(lengths.max()),
        "truncated_frac": sum(r.truncated for r in rollouts) / n,
        "reward_solved_frac": sum(r.reward >= 1.0 for r in rollouts) / n,
    }
    out.update({f"format_error/{k}": v / n for k, v in sorted(reasons.items())})
    out.update({f"reward_failure/{k}": v / n for k, v in sorted(failures.items())})
    return out


def first_reward_failure(rollouts: list[Rollout]) -> tuple[int, str] | None:
    """(how many of `rollouts` the reward service could not score, the first one's "reason: error"), or None when
    every one was scored: what a run prints so that a reward function failing on every rollout is not read as a
    run of well-formed answers scoring the fallback."""
    failed = [r for r in rollouts if r.reward_failure is not None]
    if not failed:
        return None
    first = failed[0]
    return len(failed), f"{first.reward_failure}: {first.reward_info.get('error', 'no error message')}"
