"""The paper's RL run: Llama-3.3-70B-Instruct, GRPO, 32 problems x 16 rollouts, 1,600 steps, 16k context, 512 H100s.

lr, beta, epsilon, temperature and max new tokens are not published: the peers' values from base.py are kept
(so are Adam b1/b2, weight decay, grad clip, the lr schedule and warmup, the advantage std's ddof/eps: all
"not published", marked where base.py sets them). The loss is GRPO's (the paper's objective): each sequence's
token mean, then the mean over the samples (seq-mean-token-mean).
"""

from experiments import base


def get_config(arg: str | None = None):
    """The SWE-RL 70B run (no variants)."""
    base.check_variant(arg, (), "swerl_llama3_70b.py")
    c = base.get_config()
    c.model.name = "llama3.3-70b"
    c.model.hf_dir = "/checkpoints/Llama-3.3-70B-Instruct"  # an HF directory on the cluster's shared disk
    # fp32 master weights, bf16 compute (not published; MaxText's default): with bf16 params optax's Adam keeps bf16
    # moments and applies lr-1e-6 updates to bf16 weights, whose ~0.4% resolution rounds most of them to nothing.
    c.model.param_dtype = "float32"
    c.model.dtype = "bfloat16"
    c.model.remat = "full"
    c.model.attention_impl = "cudnn"
    c.mesh.name = "h100x512"
    c.data.train_files = "/data/swerl/rl_seeds/*.array_record"
    c.data.max_prompt_len = 12288
    c.sampler.max_new_tokens = 4096  # 16k context in all; the split is not published
    c.rl.num_steps = 1600
    c.rl.prompts_per_step = 32
    c.rl.num_samples = 16
    c.rl.advantage = "grpo"
    c.rl.kl_coef = 0.04
    c.rl.kl_estimator = "k3"
    c.rl.loss_agg = "seq-mean-token-mean"  # GRPO: 1/|o_i| per sequence, then the mean over the G samples
    c.optim.learning_rate = 1e-6
    # 0: the step's 32 x 16 = 512 sequences in one micro-batch, one per device over the 512 batch shards
    # (launch/plan.py: 2 per device would still fit). 32 did not split over the 512 shards.
    c.rl.micro_batch_size = 0
    c.checkpoint.every_steps = 25
    return c
