"""Asynchronous GRPO as AReaL runs it (issue 47): k = 0 against k = 1 plain against k = 1 decoupled with minibatch
updates, every weight bounded. The earlier staleness sweep (staleness.py) gave the decoupled objective one update
per batch, where its clip never acts (ratio to the proximal policy 1), and no arm a dual clip.

    python -m swerl_jax.sweep --config=experiments/ablations/async_grpo.py:testbed --seeds 0,1,2,3,4,5 \\
        --seed-key rl.seed --share-sft --workdir sweeps/async_grpo      # 6 RL seeds sharing one SFT stage

Every arm has rl.dual_clip = 3.0 (Ye et al. 2020's c): at k = 1 plain's ratio is taken against the stale behaviour
policy and a negative-advantage token's weight is otherwise unbounded (w = 14.1 seen); at k = 0 the single update's
ratio is 1 and it never acts, so the arms still differ only in staleness and objective. The decoupled arm splits
each batch into 4 sequential updates (rl.ppo_minibatches, AReaL's default ppo_n_minibatches) with the proximal
policy fixed, so its clip acts from the second on; rl.warmup_steps counts updates, so that arm's warmup is
multiplied by 4 to span the same steps as the others'. The behaviour log-probs are the sampler's in all three.
"""

from experiments import base
from experiments.ablations import staleness

DUAL_CLIP = 3.0
MINIBATCHES = 4


def get_config(arg: str | None = None):
    """The paper's 70B GRPO run, with `:cpu` the CPU demo's (tiny_cpu), with `:testbed` the CPU testbed's."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/async_grpo.py")
    return staleness.get_config(arg)


def get_sweep(arg: str | None = None) -> list[dict]:
    """k = 0; k = 1 plain; k = 1 decoupled with minibatch updates; the dual clip on all three."""
    base.check_variant(arg, ("cpu", "testbed"), "ablations/async_grpo.py")
    warmup = int(get_config(arg).rl.warmup_steps)  # in updates; -1 (optim.warmup_steps) is left as it is
    decoupled_warmup = {"rl.warmup_steps": warmup * MINIBATCHES} if warmup > 0 else {}
    return [{"rl.max_staleness": 0, "rl.off_policy": "plain", "rl.dual_clip": DUAL_CLIP},
            {"rl.max_staleness": 1, "rl.off_policy": "plain", "rl.dual_clip": DUAL_CLIP},
            {"rl.max_staleness": 1, "rl.off_policy": "decoupled", "rl.dual_clip": DUAL_CLIP,
             "rl.ppo_minibatches": MINIBATCHES, **decoupled_warmup}]
