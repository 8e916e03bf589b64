"""The real pretrained SmolLM2-135M-Instruct on short real PR records (psf/requests, pallets/flask), a few steps."""

from experiments import base


def get_config(arg: str | None = None):
    """smollm2_cpu; the records file defaults to ../shared/data/pr_records_requests_flask.jsonl."""
    base.check_variant(arg, (), "smollm2_cpu.py")
    c = base.get_config()
    c.model.name = "smollm2-135m"
    c.model.hf_dir = "smollm2"  # converted once from the PyPI GGUF (swerl_jax.model.smollm2)
    c.data.train_files = "../shared/data/pr_records_requests_flask.jsonl"
    # CPU-sized: prompts cut to 1024 tokens (the records' full prompts are 2.4k-9.7k), one prompt x 4 samples per
    # step in micro-batches of 2 (one GRPO step is ~4 TFLOP of forward/backward for 135M parameters).
    c.data.max_prompt_len = 1024
    # Oracle answers of these records are 134-1,030 SmolLM2 tokens: 384 new tokens hold the shorter half, so a
    # correct answer can be sampled (48, the old value, cut every answer: reward -1 and loss 0 by construction;
    # the trainer now warns when no oracle answer fits, `data.budget.answer_budget_warning`).
    c.sampler.max_new_tokens = 384
    c.sampler.max_batch = 4
    c.rl.num_steps = 3
    c.rl.prompts_per_step = 1
    c.rl.num_samples = 4
    c.rl.micro_batch_size = 2
    c.rl.kl_coef = 0.04
    c.optim.learning_rate = 1e-6
    c.checkpoint.every_steps = 1
    return c
