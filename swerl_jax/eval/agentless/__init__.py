"""Agentless Mini (SWE-RL's scaffold): file localization, repair, test generation/selection, reranking.

Behaviour follows the release (facebookresearch/swe-rl, `src/swerl/agentless_mini`), written anew: see each
module's docstring for what matches the release and where we differ.
"""
