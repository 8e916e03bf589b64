"""DeepSWE's GRPO++ switches over the paper's run.

clip-high (eps_low 0.2, eps_high 0.28), no KL, no std normalisation, leave-one-out advantage, Dr.GRPO length
normalisation, compact filtering, no entropy loss, and DeepSWE's two conventions (DESIGN.md, "Reference facts"):
its verl fork divides each row's token sum by the padded response width (max_new_tokens: responses are padded
to it) and averages over ALL rows, compact-filtered ones adding 0 (rl.seq_mean_rows="all"); masked trajectories
get no final reward, so they stay out of their group's baseline (rl.baseline_excludes_filtered=True).
"""

from experiments import base, swerl_llama3_70b


def get_config(arg: str | None = None):
    """GRPO++ on the 70B setup; `arg="tiny"` applies the same switches to tiny_cpu, `arg="testbed"` to the CPU
    testbed (experiments/testbed_cpu.py)."""
    base.check_variant(arg, ("tiny", "testbed"), "deepswe_grpo_pp.py")
    if arg == "tiny":
        from experiments import tiny_cpu

        c = tiny_cpu.get_config()
    elif arg == "testbed":
        from experiments import testbed_cpu

        c = testbed_cpu.get_config()
    else:
        c = swerl_llama3_70b.get_config()
    c.rl.clip_eps_low = 0.2
    c.rl.clip_eps_high = 0.28
    c.rl.kl_coef = 0.0
    c.rl.advantage = "loo"
    c.rl.loss_agg = "seq-mean-token-sum-norm"
    c.rl.loss_norm = 0  # 0: sampler.max_new_tokens, the padded response width
    c.rl.seq_mean_rows = "all"
    c.rl.compact_filtering = True
    c.rl.baseline_excludes_filtered = True
    c.rl.entropy_coef = 0.0
    return c
