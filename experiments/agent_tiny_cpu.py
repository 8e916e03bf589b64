"""Agentic RL on this CPU: a ~7M-parameter Llama learns to fix synthetic bugs with tools, rewarded by hidden tests.

The tasks are `data.synthetic_num_records` synthetic repositories (swerl_jax/agent/synthetic.py: one module with a
bug, unit tests the agent never sees); an episode is R2E-Gym-style tool calls (view, str_replace, ..., finish) in a
sandboxed checkout, and the reward is 1 when the hidden tests pass on the final diff, else 0. As in `make demo`,
a short SFT stage on scripted gold episodes (view -> str_replace -> finish, run through the real environments, loss
on the model's turns only) warm-starts the policy, then RL with DeepSWE's switches but REINFORCE advantages (no
baseline; see below) trains on a fixed 2 of the tasks, 8 episodes each per step, so the reward curve measures
learning. The prompt is compact (the tools' syntax only) to keep a 3-turn episode under ~700 tokens.

    python -m swerl_jax.train --config=experiments/agent_tiny_cpu.py          # :short = the suite's shorter run
"""

from experiments import base, deepswe_grpo_pp, tiny_cpu


def get_config(arg: str | None = None):
    """agent_tiny_cpu; `arg="short"`: its first 8 GRPO steps (the suite's run: the same stages, fewer steps)."""
    base.check_variant(arg, ("short",), "agent_tiny_cpu.py")
    c = tiny_cpu.get_config()
    grpo_pp = deepswe_grpo_pp.get_config("tiny").rl
    for key in ("clip_eps_low", "clip_eps_high", "kl_coef", "advantage", "loss_agg", "seq_mean_rows",
                "compact_filtering", "baseline_excludes_filtered", "entropy_coef"):
        c.rl[key] = grpo_pp[key]
    # Compact filtering off (DeepSWE masks episodes that ran out of turns): a 3-turn task with 4 turns is not too
    # long for its budget; masked, the flailing episodes were never penalised (measured: finish rate 0.56 -> 0.25
    # and reward 0.19 -> 0.13 in 6 steps with it on).
    c.rl.compact_filtering = False
    c.rl.baseline_excludes_filtered = False
    # REINFORCE without a baseline (the reward itself; rl/advantages.py): with 0/1 rewards only resolved episodes
    # move the policy. With leave-one-out advantages (DeepSWE's) the failed episodes' negative gradients, on
    # garbage continuations of one slipped token, drowned the signal: flat at lr 2e-4, collapse at >= 5e-4
    # (BENCHMARKS.md "Agentic GRPO"); without them the resolved rate rises (3 seeds: 0.34 -> 0.45 in 20 steps).
    c.rl.advantage = "reinforce"
    c.rl.task = "agent"
    c.rl.loss_norm = 1024  # Dr.GRPO: each row's token sum over the padded response width (agent.max_context)
    c.rl.num_steps = 20 if arg != "short" else 8
    c.data.synthetic_num_records = 8
    c.data.rl_num_records = 2
    c.data.max_prompt_len = 1024
    c.agent.reward = "execution"
    c.agent.max_turns = 4  # the gold episode takes 3
    c.agent.max_context = 1024
    c.agent.timeout_s = 300.0
    c.agent.step_timeout_s = 30.0
    c.agent.env_workers = 4
    c.agent.compact_prompt = True
    c.agent.eval_tasks = 8
    c.rl.micro_batch_size = 4  # 16 episodes of up to 1k tokens: the 49k-vocab logits in 4 pieces (memory)
    c.sampler.max_new_tokens = 160  # per turn: a str_replace of a synthetic bug is ~60-110 tokens
    # the trainer's own engine, each conversation's K/V kept between turns (swerl_jax/sampler/sessions.py)
    c.sampler.mode = "inline"
    c.agent.kv_cache = "kept"
    # SFT on the 2 tasks' gold episodes, 2 per batch (8 repeated the same 2 rows 4x: 4x the time, the same
    # gradient): next-token loss 10.9 -> 0.009 in 100 steps
    c.sft.num_steps = 100
    c.sft.batch_size = 2
    c.sft.max_len = 1024
    c.sampler.temperature = 1.0  # DeepSWE samples at 1.0; the SFT policy then resolves ~20% of episodes
    return c
