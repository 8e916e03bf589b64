"""The real pretrained SmolLM2-135M-Instruct on short real PR records (psf/requests, pallets/flask), a few steps."""

from experiments import base


def get_config(arg: str | None = None):
    """smollm2_cpu; the records file defaults to ../shared/data/pr_records_requests_flask.jsonl."""
    del arg
    c = base.get_config()
    c.model.name = "smollm2-135m"
    c.model.hf_dir = "smollm2"  # converted once from the PyPI GGUF (swerl_jax.model.smollm2)
    c.data.train_files = "../shared/data/pr_records_requests_flask.jsonl"
    c.data.max_prompt_len = 2048
    c.sampler.max_new_tokens = 64
    c.rl.num_steps = 3
    c.rl.prompts_per_step = 2
    c.rl.num_samples = 4
    c.rl.kl_coef = 0.04
    c.optim.learning_rate = 1e-6
    c.checkpoint.every_steps = 1
    return c
