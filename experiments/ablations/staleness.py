"""Synchronous against asynchronous GRPO (issue 35): does learning from batches one policy version old cost
anything, and does AReaL's decoupled objective buy it back? SWE-RL and DeepSWE trained synchronously (k = 0).

    python -m swerl_jax.sweep --config=experiments/ablations/staleness.py:cpu --seeds 0,1,2 --share-sft --workdir W
    python -m swerl_jax.sweep --config=experiments/ablations/staleness.py:testbed --seeds 0,1,2 --share-sft ...

Variants: k = 0 (the papers' loop), k = 1 with the plain clipped ratio against the behaviour log-probs, and k = 1
with the decoupled objective (README "Asynchronous RL"). On tiny_cpu each variant's reward curve and held-out
repair metric are compared over the seeds; speed is BENCHMARKS.md's business (benchmarks/async_rl.py).
"""

from experiments import base, swerl_llama3_70b, testbed_cpu, tiny_cpu


def get_config(arg: str | None = None):
    """The paper's 70B GRPO run, with `:cpu` the CPU demo's (tiny_cpu), with `:testbed` the CPU testbed's."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/staleness.py")
    return {"cpu": tiny_cpu.get_config, "testbed": testbed_cpu.get_config}.get(arg, swerl_llama3_70b.get_config)()


def get_sweep(arg: str | None = None) -> list[dict]:
    """k = 0; k = 1 plain; k = 1 decoupled. The behaviour log-probs are the sampler's in all three."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/staleness.py")
    return [{"rl.max_staleness": 0, "rl.off_policy": "plain"},
            {"rl.max_staleness": 1, "rl.off_policy": "plain"},
            {"rl.max_staleness": 1, "rl.off_policy": "decoupled"}]
