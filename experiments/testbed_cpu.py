"""The CPU testbed: SWE-RL on procedurally generated repair tasks, where an idea can show on held-out tasks in an hour.

The tasks come from `swerl_jax/testbed` (20 bug families over generated Python packages: identifiers, helpers,
distractor modules and issue wording drawn per task; each with an oracle edit and hidden unit tests). An SFT stage
on the oracle answers of
`data.synthetic_num_records` training tasks (seed `seed`) teaches the answer format and part of the fixes; GRPO then
samples `rl.prompts_per_step` x `rl.num_samples` answers per step over the same training tasks (a fresh draw every
step: the policy must learn fixes, not instances). The held-out metric is the paper's repair score plus the
execution-resolved rate (hidden tests, run in the sandbox), greedy, on `eval.num_records` tasks of seed
`seed + 1000`: instances never trained on (`testbed.tasks.task_key` checks that none equals a training task).

The policy is `testbed-128x4` (4 layers, width 128) over the testbed's own 2,048-token tokenizer
(`model.tokenizer="testbed"`, `swerl_jax/testbed/tokenizer.py`), and its SFT loss covers the prompt too
(`sft.prompt_loss_weight=1`). Measured (ABLATIONS.md "The CPU testbed"): with SmolLM2's 49k vocabulary and the loss
on the answer only, 600 SFT steps left 0% well-formed held-out answers (the policy writes the right fix with
invented names: it never learned to copy from its context); with both changes, 2,000 steps (1.46 s each, 49
minutes) leave 35.5% well-formed, a repair score of 34.9 and 32.5% resolved by the hidden tests: well below
perfect, which is where RL has room. GRPO then takes 100 steps of 2 tasks x 16 samples (~6.5 s a step alone,
~12 s beside a second run; two held-out evals of 200 tasks, ~15 s each): about 49 + 12 minutes a seed here with
padded rows. SFT rows are now packed (`sft.pack=True`: 0.74 CPU-s a step against 1.32, BENCHMARKS.md "The
testbed's first hour"), so about 20-25 + 12 minutes on the idle machine. Seed 0 packed (ABLATIONS.md "The first
hour, packed"): SFT resolved 40.0%, score 41.2; GRPO step 100 resolved 42.5%, score 46.3.

    python -m swerl_jax.train --config=experiments/testbed_cpu.py --workdir=runs/testbed/s0
    python -m swerl_jax.train --config=experiments/testbed_cpu.py --workdir=runs/testbed/s0 \\
        --config.eval.families=api_misuse,missing_copy --config.data.testbed_families=...   # transfer to new bugs
    python -m swerl_jax.sweep --config=experiments/ablations/testbed.py --seeds 0,1,2 --seed-key rl.seed \\
        --share-sft --workdir sweeps/testbed          # SFT vs GRPO vs discrete reward vs GRPO++, one SFT stage

The run scores the SFT stage's policy on the same held-out tasks before GRPO starts (WORKDIR/sft/eval.json, its
answers in sft/eval_rows.jsonl), so one run gives both sides of RL vs SFT, paired. Variant `:heldout_families`
trains on 16 families and evaluates on the other 4 (does a fix transfer to a bug family never seen?).
Measured choices (ABLATIONS.md "The CPU testbed"): see the comments below.
"""

from experiments import base, tiny_cpu

# Families kept out of training by the `heldout_families` variant: one per kind of skill (a two-file change, a
# copy-before-mutate, a boolean operator, an index).
HELDOUT_FAMILIES = "api_misuse,missing_copy,wrong_bool_op,wrong_index"


def get_config(arg: str | None = None):
    """testbed_cpu; `arg="heldout_families"`: train on 16 families, evaluate on the other 4."""
    base.check_variant(arg, ("heldout_families",), "testbed_cpu.py")
    c = tiny_cpu.get_config()  # compact prompt, the separate sampler process, continuous reward
    c.model.name = "testbed-128x4"  # its 2,048-row head: the decoder, not the vocabulary, holds the FLOPs
    c.model.tokenizer = "testbed"
    c.data.generator = "testbed"
    c.data.testbed_max_distractors = 1  # compact prompts of 175-385 tokens (2 distractors: up to ~485)
    c.data.synthetic_num_records = 1000  # the training tasks (SFT's records; GRPO draws from the same)
    c.data.rl_num_records = 0  # every training task: each GRPO step draws fresh prompts
    c.data.max_prompt_len = 400
    c.sampler.max_new_tokens = 224  # oracle answers are 101-198 tokens
    c.sampler.temperature = 1.0  # 0.7 left a policy of entropy ~0.03 nats/token: groups of near-identical answers
    c.sft.max_len = 640  # prompt + oracle answer <= 583 tokens
    c.sft.batch_size = 8
    c.sft.num_steps = 2000  # 600 left 0% well-formed answers
    c.sft.prompt_loss_weight = 1.0  # next-token loss over the issue and code too: where copying is learned
    c.sft.learning_rate = 2e-3
    # Whole examples packed side by side (batching.pack_segments): the same loss, the rows 77% real tokens instead
    # of 52%, a step 1.4-1.6x cheaper (BENCHMARKS.md "The testbed's first hour"). ABLATIONS.md's testbed tables were
    # measured before it: --config.sft.pack=False reproduces them bit for bit.
    c.sft.pack = True
    # GRPO (measured, ABLATIONS.md "Round 3"): 2 tasks x 16 samples (a group of 16 holds right and wrong answers
    # more often than one of 8), lr 1e-4 after a 10-update warmup. Without the warmup, lr 2e-4 to 3e-4 moved nothing
    # or lost resolved tasks and 1e-3 collapsed to all-malformed answers within 20 steps.
    c.rl.prompts_per_step = 2
    c.rl.num_samples = 16
    c.rl.num_steps = 100
    c.rl.warmup_steps = 10
    c.optim.learning_rate = 1e-4
    c.checkpoint.every_steps = 50
    c.eval.num_records = 200
    c.eval.every_steps = 50
    if arg == "heldout_families":
        c.data.testbed_families = ",".join(f for f in _all_families() if f not in HELDOUT_FAMILIES.split(","))
        c.eval.families = HELDOUT_FAMILIES
    return c


def _all_families() -> tuple[str, ...]:
    from swerl_jax.testbed.tasks import FAMILY_NAMES

    return FAMILY_NAMES
