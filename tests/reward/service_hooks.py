"""Reward hooks the service tests load in worker processes through ``kind="python:..."``."""

import time

from swerl_jax.reward import calculate_search_replace_reward


def slow_on_request(code_context: dict, oracle_new_content: dict, output: str) -> tuple[float, dict]:
    """The real reward, except output "sleep:S" sleeps S seconds (a pathological item) and "raise" raises."""
    if output.startswith("sleep:"):
        time.sleep(float(output.split(":")[1]))
        return 0.25, {}
    if output == "raise":
        raise RuntimeError("hook bug")
    return calculate_search_replace_reward(code_context, oracle_new_content, output)
