"""The paper's reward ablation: 1 if the predicted diffs equal the oracle's, else 0 (-1 on format error)."""

from experiments import base, swerl_llama3_70b


def get_config(arg: str | None = None):
    """The 70B run with the discrete reward (paper: 94.2 format / 29.0 score vs 95.6 / 34.8 continuous)."""
    base.check_variant(arg, (), "ablation_discrete_reward.py")
    c = swerl_llama3_70b.get_config()  # inherits the paper's loss (seq-mean-token-mean)
    c.reward.kind = "discrete"
    return c
