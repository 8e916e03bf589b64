"""Rollouts: what the sampler returned for one step, and the padded arrays the policy update consumes.

A step has P prompts x G samples. Row n of every array is rollout (group n // G, sample n % G). The
training sequence of a rollout is its prompt, left-padded to `prompt_len`, followed by its completion,
right-padded to `completion_len`; completion token j sits at column prompt_len + j and its log-prob is
predicted from column prompt_len + j - 1, so the loss scores the window [prompt_len - 1, prompt_len - 1 + C).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

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
    advantage: float = 0.0

    @property
    def truncated(self) -> bool:
        """The completion hit max_new_tokens without a stop token (compact filtering masks these)."""
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

    def to_json(self, step: int) -> dict:
        """The rollouts/step_XXXXXX.jsonl row the notebooks read."""
        return {
            "step": step, "prompt_id": self.prompt_id, "group": self.group, "sample": self.sample,
            "completion": self.completion, "reward": self.reward, "advantage": self.advantage,
            "format_error": self.format_error, "reward_failure": self.reward_failure,
            "completion_len": int(len(self.completion_tokens)),
            "truncated": self.truncated, "finish_reason": self.finish_reason,
            "policy_version": self.policy_version, "reward_info": self.reward_info,
        }


def bucket_length(length: int, multiple: int, cap: int) -> int:
    """The smallest of multiple * 2^k (k >= 0) and `cap` that holds `length`: a few shapes per run (each one a
    train-step compilation), at most 2x padding."""
    if length > cap:
        raise ValueError(f"length {length} exceeds the cap {cap}")
    size = multiple
    while size < length:
        size *= 2
    return min(cap, size)


def build_train_batch(rollouts: list[Rollout], prompt_len: int, completion_len: int,
                      pad_id: int) -> dict[str, np.ndarray]:
    """Pack rollouts into fixed-shape arrays for the policy update.

    Returns:
      tokens [N, prompt_len + completion_len] int32, attention_mask (same shape, bool), loss_mask [N, C] fp32
      (1 on real completion tokens), old_logp [N, C] fp32 (the sampler's log-probs, 0 on padding),
      advantages [N] fp32, truncated [N] bool.
    """
    n = len(rollouts)
    width = prompt_len + completion_len
    tokens = np.full((n, width), pad_id, np.int32)
    attention = np.zeros((n, width), bool)
    loss_mask = np.zeros((n, completion_len), np.float32)
    old_logp = np.zeros((n, completion_len), np.float32)
    for i, r in enumerate(rollouts):
        p, c = len(r.prompt_tokens), len(r.completion_tokens)
        if p > prompt_len or c > completion_len:
            raise ValueError(f"rollout {r.prompt_id}/{r.sample}: prompt {p} or completion {c} tokens exceed "
                             f"the batch shape ({prompt_len}, {completion_len})")
        tokens[i, prompt_len - p:prompt_len] = r.prompt_tokens
        tokens[i, prompt_len:prompt_len + c] = r.completion_tokens
        attention[i, prompt_len - p:prompt_len + c] = True
        loss_mask[i, :c] = 1.0
        old_logp[i, :c] = r.sampler_logprobs[:c]
    return {
        "tokens": tokens,
        "attention_mask": attention,
        "loss_mask": loss_mask,
        "old_logp": old_logp,
        "advantages": np.asarray([r.advantage for r in rollouts], np.float32),
        "truncated": np.asarray([r.truncated for r in rollouts], bool),
    }


def reward_matrix(rollouts: list[Rollout], num_prompts: int, num_samples: int) -> np.ndarray:
    """Rewards as [P, G] in (group, sample) order; raises if a rollout is missing or unscored."""
    rewards = np.full((num_prompts, num_samples), np.nan, np.float64)  # advantages are float64 host math
    for r in rollouts:
        rewards[r.group, r.sample] = r.reward
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
