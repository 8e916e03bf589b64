"""Reinforcement learning: GRPO objectives (`objectives`), rollouts and the trainer built on them."""
