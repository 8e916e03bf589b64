"""The `make demo` job: a ~7M-parameter Llama on synthetic single-file bug fixes, on 2 CPU cores in minutes.

A short SFT stage on the oracle answers warm-starts the policy (the paper starts from an instruct model), then
GRPO with the separate sampler process, as in production.
"""

from experiments import base


def get_config(arg: str | None = None):
    """tiny_cpu; `arg="short"` halves the GRPO steps (the test's shorter run)."""
    c = base.get_config()
    c.model.name = "demo-7m"
    c.mesh.name = "cpu"
    c.data.train_files = ""  # synthetic records
    c.data.synthetic_num_records = 64
    # The compact prompt (same task and answer format, short instructions): 174-239 tokens instead of the
    # release's 518-543, which would dominate the step time of a 7M-parameter policy on 2 cores.
    c.data.prompt_style = "compact"
    c.data.max_prompt_len = 256
    c.sampler.max_new_tokens = 192  # oracle answers are 104-168 tokens
    c.sampler.max_batch = 64
    c.sampler.temperature = 1.0
    c.rl.num_steps = 40 if arg != "short" else 20
    c.rl.prompts_per_step = 4
    c.rl.num_samples = 8
    c.rl.kl_coef = 0.0
    c.optim.learning_rate = 3e-4
    c.sft.num_steps = 150
    c.sft.batch_size = 16
    c.sft.learning_rate = 1e-3
    c.sft.max_len = 448
    c.checkpoint.every_steps = 10
    c.reward.num_workers = 2
    return c
