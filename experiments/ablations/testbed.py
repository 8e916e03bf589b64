"""The three ablations on the CPU testbed in one sweep, RL seeds from one SFT stage (ABLATIONS.md "The CPU testbed").

    python -m swerl_jax.sweep --config=experiments/ablations/testbed.py --seeds 0,1,2 --seed-key rl.seed \\
        --share-sft [--sft-from SWEEP_WITH_THE_SFT_STAGE] --workdir W

Four variants, each compared with `grpo` (the paper's GRPO with the continuous reward) on the same held-out tasks:
  sft       the SFT stage alone (RL vs SFT; the paper: repair 34.8 vs 29.6)
  grpo      GRPO, continuous reward
  discrete  GRPO, discrete reward (the paper: 34.8 continuous vs 29.0 discrete)
  grpo_pp   DeepSWE's GRPO++ switches all on (experiments/deepswe_grpo_pp.py:testbed)
`--seed-key rl.seed` gives every run the same SFT stage, model init and held-out tasks, and each seed its own GRPO
sampling and prompt order: the interval covers the RL stage's seed variance (the paper's arms, too, start from one
base model). The SFT stage is trained once (by the first run, or found under `--sft-from`) and copied.
"""

from experiments import base, deepswe_grpo_pp, testbed_cpu

# GRPO++'s switches as overrides of the testbed's GRPO (what deepswe_grpo_pp.get_config("testbed") changes)
_GRPO_PP_KEYS = ("rl.clip_eps_low", "rl.clip_eps_high", "rl.kl_coef", "rl.advantage", "rl.loss_agg", "rl.loss_norm",
                 "rl.seq_mean_rows", "rl.compact_filtering", "rl.baseline_excludes_filtered", "rl.entropy_coef")


def get_config(arg: str | None = None):
    """The CPU testbed (experiments/testbed_cpu.py)."""
    base.check_variant(arg, (), "ablations/testbed.py")
    return testbed_cpu.get_config()


def get_sweep(arg: str | None = None) -> list[dict]:
    """sft, grpo, discrete, grpo_pp (in that order; `--variants` picks by position)."""
    base.check_variant(arg, (), "ablations/testbed.py")
    plain, pp = testbed_cpu.get_config(), deepswe_grpo_pp.get_config("testbed")
    switches = {}
    for key in _GRPO_PP_KEYS:
        section, field = key.split(".")
        if pp[section][field] != plain[section][field]:
            switches[key] = pp[section][field]
    return [{"rl.num_steps": 0}, {}, {"reward.kind": "discrete"}, switches]
