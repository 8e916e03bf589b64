"""Continuous vs discrete reward (the paper: repair 95.6 format / 34.8 score continuous, 94.2 / 29.0 discrete).

    python -m swerl_jax.sweep --config=experiments/ablations/reward_kind.py:cpu --seeds 0,1,2 --workdir W
    python -m swerl_jax.sweep --config=experiments/ablations/reward_kind.py:testbed --seeds 0,1,2 --share-sft ...
"""

from experiments import base, swerl_llama3_70b, testbed_cpu, tiny_cpu


def get_config(arg: str | None = None):
    """The paper's 70B GRPO run, with `:cpu` the CPU demo's (tiny_cpu), with `:testbed` the CPU testbed's."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/reward_kind.py")
    return {"cpu": tiny_cpu.get_config, "testbed": testbed_cpu.get_config}.get(arg, swerl_llama3_70b.get_config)()


def get_sweep(arg: str | None = None) -> list[dict]:
    """The two reward kinds; everything else as the base."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/reward_kind.py")
    return [{"reward.kind": "continuous"}, {"reward.kind": "discrete"}]
