"""DeepSWE's agentic RL run at its published scale: Qwen3-32B, R2E-Gym-style tools, GRPO++, 32k context.

Published (the DeepSWE-Preview blog, Agentica x Together AI, July 2025): Qwen3-32B trained with RL only, 4,500
R2E-Gym tasks, ~200 steps, 64 H100s over six days, 32k max context, GRPO++ (clip-high 0.28, no KL, no std
normalisation, leave-one-out advantage, Dr.GRPO length normalisation, compact filtering of trajectories that hit
max context / steps / timeout, no entropy loss: `deepswe_grpo_pp.py`), execution reward (1 when the hidden tests
pass), R2E-Gym's tools (file editor, search, bash, finish); 42.2% pass@1 (mean of 16 runs), 71.0% pass@16, 59.0%
with hybrid test-time scaling on SWE-bench Verified. Not published here (marked below): prompts per step, samples
per prompt, max turns, per-turn tokens, lr, the episode timeouts. The model is Qwen3-32B (`qwen3-32b`: the Qwen3
family of swerl_jax/model/config.py, per-head q/k RMSNorm, untied head); `model.hf_dir` names the Hugging Face
directory, whose config.json must be a Qwen3's (another family is refused at load time) and whose tokenizer and
ChatML chat template the prompts use.

    launch/local.sh experiments/deepswe_agent.py --workdir=/ckpt/deepswe        # needs the R2E-Gym/SWE tasks
"""

from experiments import base, deepswe_grpo_pp


def get_config(arg: str | None = None):
    """The DeepSWE run (no variants)."""
    base.check_variant(arg, (), "deepswe_agent.py")
    c = deepswe_grpo_pp.get_config()  # the 70B paper run with GRPO++'s switches; the model and task change below
    c.rl.task = "agent"
    c.model.name = "qwen3-32b"
    c.model.hf_dir = "/checkpoints/Qwen3-32B"  # an HF directory on the cluster's shared disk
    c.model.attention_impl = "cudnn"
    c.mesh.name = "h100x64"
    # 8 nodes x 8 GPUs: tensor parallelism inside a node shards the 152k-vocab logits of a 32k-token episode
    # (launch/plan.py: with FSDP alone the fp32 loss alone needs 58 GiB per GPU); FSDP over the rest.
    c.mesh.shape.tensor = 8
    c.mesh.shape.fsdp = -1
    c.agent.instances = "/data/r2e_gym/train.jsonl"  # SWE-bench-shaped instances (R2E-Gym's 4,500 tasks)
    c.agent.repos = "/data/r2e_gym/repos"
    c.agent.reward = "execution"
    c.agent.max_context = 32768  # published
    c.agent.max_turns = 50  # not published
    c.agent.timeout_s = 1800.0  # not published
    c.agent.step_timeout_s = 120.0  # not published
    c.agent.env_workers = 64
    c.agent.waves = 2  # environments step while the other half generates
    c.data.train_files = ""
    c.data.max_prompt_len = 32768
    c.sampler.max_new_tokens = 8192  # per turn; not published
    c.rl.num_steps = 200  # published (~200 steps)
    c.rl.prompts_per_step = 8  # not published
    c.rl.num_samples = 8  # not published
    c.rl.loss_norm = 32768  # Dr.GRPO over the padded response width (the 32k context)
    c.rl.micro_batch_size = 8  # one 32k-token episode per batch shard at a time (plan: train 36.9 GiB per GPU)
    c.optim.learning_rate = 1e-6  # not published
    c.checkpoint.every_steps = 10
    c.sft.num_steps = 0  # RL only (published)
    return c
