"""Agentic RL on this CPU over tasks generated from a real repository (issue 58): `agent_tiny_cpu`'s ~7M policy,
its tools and GRPO switches, on SWE-bench-shaped instances that `python -m swerl_jax.tasks generate` made (bugs
injected in a repository SWE-bench does not know, each validated in the sandbox, with an inferred spec).

Training draws from the generated `train.jsonl`; the held-out split (`heldout.jsonl`: no task shares a modified
file with a training task) is evaluated greedily at the last step (`agent.eval_instances`). Both are graded by the
harness's `LocalExecutor` in the repository's dated environment with the trusted plugin's verdicts (the execution
reward: 1 when the FAIL_TO_PASS and PASS_TO_PASS tests pass; a run that tampers with pytest is `tampered`, 0). The
policy starts from its seeded random init (RL only, as DeepSWE: the SFT stage scripts synthetic tasks' episodes):
on a CPU it resolves ~none; what a run measures is that the plumbing holds on generated tasks, its throughput, and
its integrity (agent/tampered_rate, agent/log_only_resolved_rate). The paths default to the generator's output
folder `workdirs/tasks` (from the current directory, else the repository root):

    python -m swerl_jax.tasks generate --repo MIRROR --commit SHA --out workdirs/tasks
    python -m swerl_jax.train --config=experiments/agent_tasks_cpu.py --workdir=workdirs/agent_tasks \\
        [--config.agent.instances=OUT/train.jsonl --config.agent.eval_instances=OUT/heldout.jsonl \\
         --config.agent.repos=OUT/repos]
    benchmarks/agent_tasks_recount.py --workdir workdirs/agent_tasks      # its rates recounted from the rows

`:short` = 2 steps of 2 tasks x 2 episodes, 2 held-out tasks (the smallest end-to-end run).
"""

from experiments import agent_tiny_cpu, base

TASKS = "workdirs/tasks"  # `python -m swerl_jax.tasks generate --out` of the default paths


def get_config(arg: str | None = None):
    """agent_tasks_cpu; `arg="short"`: 2 steps of 2 x 2 episodes (the end-to-end check)."""
    base.check_variant(arg, ("short",), "agent_tasks_cpu.py")
    short = arg == "short"
    c = agent_tiny_cpu.get_config()
    c.agent.instances = f"{TASKS}/train.jsonl"
    c.agent.eval_instances = f"{TASKS}/heldout.jsonl"
    c.agent.repos = f"{TASKS}/repos"
    c.agent.reward = "execution"
    c.data.rl_num_records = 0  # every training task of the split
    c.agent.eval_tasks = 2 if short else 8
    # A generated statement names the failing tests with their assertion and traceback (~2-3k characters, ~700-
    # 1000 tokens): the whole conversation gets 2k tokens (the synthetic tasks' 1k would end it at the prompt).
    c.agent.max_context = 2048
    c.data.max_prompt_len = 2048
    c.sft.max_len = 2048
    c.rl.loss_norm = 2048  # Dr.GRPO over the padded response width (agent.max_context)
    c.agent.max_turns = 4
    # a real repository's grading runs its module's tests (tens to hundreds) in the dated environment
    c.agent.step_timeout_s = 60.0
    c.agent.timeout_s = 600.0
    c.agent.env_workers = 2  # a shared 2-core CPU
    c.sft.num_steps = 0  # RL only: the agent SFT stage scripts synthetic tasks' gold episodes
    c.rl.num_steps = 2 if short else 10
    c.rl.prompts_per_step = 2
    c.rl.num_samples = 2 if short else 4
    c.rl.micro_batch_size = 2
    c.eval.every_steps = c.rl.num_steps  # the held-out split once, at the last step
    c.checkpoint.every_steps = c.rl.num_steps
    return c
