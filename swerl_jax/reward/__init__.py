"""The SWE-RL reward: edit parsing/application, diff normalisation, similarity, reward functions, service."""

from swerl_jax.answer import FormatError
from swerl_jax.reward.functions import (
    REWARD_KINDS,
    calculate_discrete_reward,
    calculate_reward,
    calculate_reward_unidiff,
    calculate_search_replace_reward,
    compact_info,
    get_reward_fn,
    oracle_patch,
)

__all__ = [
    "REWARD_KINDS",
    "FormatError",
    "calculate_discrete_reward",
    "calculate_reward",
    "calculate_reward_unidiff",
    "calculate_search_replace_reward",
    "compact_info",
    "get_reward_fn",
    "oracle_patch",
]
