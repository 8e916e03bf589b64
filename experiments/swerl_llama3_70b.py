"""The paper's RL run: Llama-3.3-70B-Instruct, GRPO, 32 problems x 16 rollouts, 1,600 steps, 16k context, 512 H100s.

lr, beta, epsilon, temperature and max new tokens are not published: the peers' values from base.py are kept.
"""

from experiments import base


def get_config(arg: str | None = None):
    """The SWE-RL 70B run."""
    del arg
    c = base.get_config()
    c.model.name = "llama3.3-70b"
    c.model.hf_dir = "/checkpoints/Llama-3.3-70B-Instruct"  # an HF directory on the cluster's shared disk
    c.model.param_dtype = "bfloat16"
    c.model.dtype = "bfloat16"
    c.model.remat = "full"
    c.model.attention_impl = "cudnn"
    c.mesh.name = "h100x512"
    c.data.train_files = "/data/swerl/rl_seeds-*.arrayrecord"
    c.data.max_prompt_len = 12288
    c.sampler.max_new_tokens = 4096  # 16k context in all; the split is not published
    c.rl.num_steps = 1600
    c.rl.prompts_per_step = 32
    c.rl.num_samples = 16
    c.rl.advantage = "grpo"
    c.rl.kl_coef = 0.04
    c.rl.kl_estimator = "k3"
    c.optim.learning_rate = 1e-6
    c.rl.micro_batch_size = 32
    c.checkpoint.every_steps = 25
    return c
