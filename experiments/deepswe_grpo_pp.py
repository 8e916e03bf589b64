"""DeepSWE's GRPO++ switches over the paper's run.

clip-high (eps_low 0.2, eps_high 0.28), no KL, no std normalisation, leave-one-out advantage, Dr.GRPO length
normalisation (each sequence's token sum divided by the max length), compact filtering, no entropy loss.
"""

from experiments import swerl_llama3_70b


def get_config(arg: str | None = None):
    """GRPO++ on the 70B setup; `arg="tiny"` applies the same switches to tiny_cpu."""
    if arg == "tiny":
        from experiments import tiny_cpu

        c = tiny_cpu.get_config()
    else:
        c = swerl_llama3_70b.get_config(arg)
    c.rl.clip_eps_low = 0.2
    c.rl.clip_eps_high = 0.28
    c.rl.kl_coef = 0.0
    c.rl.advantage = "loo"
    c.rl.loss_agg = "seq-mean-token-sum-norm"
    c.rl.loss_norm = 0  # 0: sampler.max_new_tokens
    c.rl.compact_filtering = True
    c.rl.entropy_coef = 0.0
    return c
