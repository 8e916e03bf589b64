"""The sampler's wire types, shared by the engine, the server, the protocol and the client (no JAX: the client and
the protocol import only this and numpy, so a process that only asks for samples never loads JAX or Flax)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

SECRET_ENV = "SWERL_SAMPLER_SECRET"  # the shared secret's env var (server and client)


class RequestTooLarge(ValueError):
    """A request that does not fit the engine's buckets (prompt length, new tokens or samples per batch)."""


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample. `temperature=0` is greedy; `top_k=0` and `top_p=1` switch those filters off."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] | None = None  # None: the engine's EOS ids
    stop_strings: tuple[str, ...] = ()
    include_stop_string: bool = False

    def validate(self) -> SamplingParams:
        """Return self, or raise ValueError naming the bad field."""
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"sampling.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k must be >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"sampling.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if any(not s for s in self.stop_strings):
            raise ValueError("sampling.stop_strings must not contain an empty string")
        return self


@dataclasses.dataclass
class Completion:
    """One generated sample. `tokens` include the stop token when one ended the row."""

    prompt_index: int
    sample_index: int
    tokens: np.ndarray  # int32 [completion_length]
    logprobs: np.ndarray  # float32 [completion_length], see the module docstring
    text: str | None
    finish_reason: str  # "stop" | "length"
    prompt_length: int
    completion_length: int
    policy_version: int  # of its first token (its oldest)
    # Per token, the policy version that sampled it (a partial rollout's tokens span versions: `swap`); None: all
    # `policy_version` (partial rollouts off)
    token_versions: np.ndarray | None = None


def sampling_params(config: Any) -> SamplingParams:
    """The experiment config's `sampler` section as SamplingParams (stop at the tokenizer's end of turn); a bad
    value raises ValueError naming its `sampler.*` key."""
    s = config.sampler
    try:
        return SamplingParams(temperature=float(s.temperature), top_p=float(s.top_p), top_k=int(s.top_k),
                              max_new_tokens=int(s.max_new_tokens)).validate()
    except ValueError as err:  # name the config key (the fields are the sampler section's), not the dataclass
        raise ValueError(str(err).replace("sampling.", "sampler.", 1)) from err
