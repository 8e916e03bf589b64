"""The `make demo` job: a ~7M-parameter Llama on synthetic single-file bug fixes, on 2 CPU cores in minutes.

A short SFT stage on the oracle answers of 8 records warm-starts the policy (the paper starts from an instruct
model), then GRPO with the separate sampler process, as in production, on a fixed set of 2 of those records:
every step samples 8 answers to both, so the reward curve measures learning, not which prompts were drawn.

Measured on this setting (2-core CPU; BENCHMARKS.md "GRPO demo"): SFT takes the next-token loss from 10.8 to
~0.02; sampled at T 0.7 the policy then gets the format or the file path wrong in about half of its answers
(reward ~-0.3), and GRPO at lr 2e-4 takes the two prompts to ~+0.5..+0.75 in ~12 steps (after ~20 steps the
entropy spikes on some steps and the reward sags to ~+0.2..+0.6). What did not work: GRPO over 8-16 records
with 2 prompts per step (each prompt revisited every 4-8 steps; per-record gains were undone in between, reward
flat), lr >= 4e-4 or SGD-like updates (Adam eps 1e-3, lr 1e-3..3e-3): the answer format collapses in a few steps.
"""

from experiments import base


def get_config(arg: str | None = None):
    """tiny_cpu; `arg="short"` halves the GRPO steps."""
    base.check_variant(arg, ("short",), "tiny_cpu.py")
    c = base.get_config()
    c.model.name = "demo-7m"
    c.mesh.name = "cpu"
    c.data.train_files = ""  # synthetic records
    # One repository: a file's folder is the repo name, which no issue names; with six, the policy guessed it.
    c.data.synthetic_repos = "acme/widgets"
    c.data.synthetic_num_records = 8  # the SFT stage's records
    c.data.rl_num_records = 2  # GRPO's: a fixed set, every step sees all of it
    # The compact prompt (same task and answer format, short instructions): 174-239 tokens instead of the
    # release's 518-543, which would dominate the step time of a 7M-parameter policy on 2 cores.
    c.data.prompt_style = "compact"
    c.data.max_prompt_len = 256
    c.sampler.max_new_tokens = 192  # oracle answers are 104-168 tokens
    c.sampler.max_batch = 64
    c.sampler.temperature = 0.7
    c.sampler.prompts_per_request = 1  # score each group while the next one is generated
    c.rl.num_steps = 30 if arg != "short" else 16
    c.rl.prompts_per_step = 2
    c.rl.num_samples = 8
    c.rl.kl_coef = 0.0
    c.optim.learning_rate = 2e-4
    c.sft.num_steps = 100
    c.sft.batch_size = 8
    c.sft.learning_rate = 2e-3
    c.sft.max_len = 448
    c.checkpoint.every_steps = 10
    c.reward.num_workers = 2
    return c
