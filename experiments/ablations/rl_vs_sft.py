"""RL vs SFT (the paper: repair 34.8 vs 29.6, SWE-bench Verified 41.0% vs 36.2%; RL keeps the format rate, 95.6 vs
96.2). `sft` trains only the SFT stage; `rl` adds GRPO after it (the CPU demo's warm start; at paper scale the SFT
baseline and the RL run start from the same Llama-3.3-70B-Instruct, so `rl` there is GRPO alone).

    python -m swerl_jax.sweep --config=experiments/ablations/rl_vs_sft.py:cpu --seeds 0,1,2 --workdir W
    python -m swerl_jax.sweep --config=experiments/ablations/rl_vs_sft.py:testbed --seeds 0,1,2 --share-sft ...
"""

from experiments import base, sft_llama3_70b, swerl_llama3_70b, testbed_cpu, tiny_cpu

_CPU = {"cpu": tiny_cpu.get_config, "testbed": testbed_cpu.get_config}


def get_config(arg: str | None = None):
    """tiny_cpu (`:cpu`), the CPU testbed (`:testbed`) or the paper's 70B GRPO run with the SFT baseline's stage
    settings."""
    base.check_variant(arg, tuple(_CPU), "ablations/rl_vs_sft.py")
    if arg in _CPU:
        return _CPU[arg]()
    c = swerl_llama3_70b.get_config()
    c.sft = sft_llama3_70b.get_config().sft
    c.sft.num_steps = 0  # each variant sets it
    return c


def get_sweep(arg: str | None = None) -> list[dict]:
    """`sft`: the SFT stage only; `rl`: GRPO (after the CPU warm start)."""
    base.check_variant(arg, tuple(_CPU), "ablations/rl_vs_sft.py")
    if arg in _CPU:
        c = _CPU[arg]()
        return [{"rl.num_steps": 0, "sft.num_steps": c.sft.num_steps},
                {"rl.num_steps": c.rl.num_steps, "sft.num_steps": c.sft.num_steps}]
    return [{"rl.num_steps": 0, "sft.num_steps": sft_llama3_70b.get_config().sft.num_steps},
            {"rl.num_steps": swerl_llama3_70b.get_config().rl.num_steps, "sft.num_steps": 0}]
