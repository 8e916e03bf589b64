"""DeepSWE's GRPO++ switch by switch: all switches on (experiments/deepswe_grpo_pp.py), then each one turned back to
the paper's GRPO setting while the others stay on.

    python -m swerl_jax.sweep --config=experiments/ablations/grpo_pp.py:cpu --seeds 0,1,2 --workdir W
    python -m swerl_jax.sweep --config=experiments/ablations/grpo_pp.py:testbed --seeds 0,1,2 --share-sft ...
"""

from experiments import base, deepswe_grpo_pp, swerl_llama3_70b

# switch -> the overrides that turn it off (back to the paper's GRPO values)
SWITCHES_OFF = {
    "clip_high": {"rl.clip_eps_high": 0.2},
    "no_kl": {"rl.kl_coef": 0.04},
    "loo_advantage": {"rl.advantage": "grpo"},
    "drgrpo_norm": {"rl.loss_agg": "seq-mean-token-mean", "rl.seq_mean_rows": "active"},
    "compact_filtering": {"rl.compact_filtering": False, "rl.baseline_excludes_filtered": False},
}


def get_config(arg: str | None = None):
    """GRPO++ on the 70B run, with `:cpu` on tiny_cpu, with `:testbed` on the CPU testbed."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/grpo_pp.py")
    return deepswe_grpo_pp.get_config({"cpu": "tiny", "testbed": "testbed"}.get(arg))


def get_sweep(arg: str | None = None) -> list[dict]:
    """All on, then one switch off at a time."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/grpo_pp.py")
    paper = swerl_llama3_70b.get_config()
    assert paper.rl.clip_eps_high == 0.2 and paper.rl.advantage == "grpo"  # what "off" restores
    return [{}] + [dict(off) for off in SWITCHES_OFF.values()]
