"""Dynamic sampling against none (issue 59): DAPO's zero-variance filter that refills each step with groups that
carry a signal (`rl.dynamic_sampling`, swerl_jax/rl/dynamic.py). On the testbed 17-28% of groups have zero reward
variance: they give GRPO no gradient, yet their samples are generated.

    python -m swerl_jax.sweep --config=experiments/ablations/dynamic_sampling.py:testbed --seeds 0,1,2,3,4,5 \\
        --seed-key rl.seed --share-sft --workdir sweeps/dynamic_sampling      # 6 RL seeds sharing one SFT stage

Compared per arm over the seeds: the held-out resolved rate (eval/*; `python -m swerl_jax.analysis.ablations`)
and the wall time per useful group, sum(time/step_s) / (steps x rl.prompts_per_step - groups without a signal)
(`python -m swerl_jax.analysis.useful_groups SWEEP_DIR`; with dynamic sampling every kept group is useful unless
dynamic/groups_filled > 0; without it the zero-variance groups are trained on for nothing). The dynamic arm
logs dynamic/{draws,prompts_drawn,groups_dropped,kept_frac}; its extra draws advance the data order, so over the
same steps it sees more prompts.
"""

from experiments import base
from experiments.ablations import staleness

MAX_DRAWS = 4


def get_config(arg: str | None = None):
    """The paper's 70B GRPO run, with `:cpu` the CPU demo's (tiny_cpu), with `:testbed` the CPU testbed's."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/dynamic_sampling.py")
    return staleness.get_config(arg)


def get_sweep(arg: str | None = None) -> list[dict]:
    """Without dynamic sampling; with it (at most MAX_DRAWS prompt batches a step)."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/dynamic_sampling.py")
    return [{"rl.dynamic_sampling": False},
            {"rl.dynamic_sampling": True, "rl.dynamic_sampling_max_draws": MAX_DRAWS}]
