"""User-supplied rewards (`reward.kind=python:tests.rl.reward_hooks.NAME`) for trainer tests.

A randomly initialised policy never writes a well-formed SWE-RL answer, so the real reward is -1 for every
rollout, every advantage is 0 and nothing trains. This reward varies with the text, so the tests exercise
non-zero advantages, gradients and updates.
"""


def vowel_reward(code_context: dict, oracle_new_content: dict, output: str) -> tuple[float, dict]:
    """The fraction of the output's characters that are vowels."""
    del code_context, oracle_new_content
    return sum(ch in "aeiouAEIOU" for ch in output) / max(1, len(output)), {}
