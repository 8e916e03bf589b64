"""The testbed on one GPU: the whole SWE-RL loop (SFT, then GRPO with the sampler process, the reward service and the
held-out evaluation before and after) in a few minutes, at a policy 28x the CPU testbed's.

Same tasks, tokenizer, answer format and held-out metric as experiments/testbed_cpu.py (see its docstring); what
changes is the scale a GPU affords: the policy is `testbed-512x8` (26M parameters against testbed-128x4's 0.9M), SFT
sees 4,000 training tasks in batches of 32, and each GRPO step samples 8 tasks x 16 answers. The sampler process
shares the trainer's GPU, so the two split its memory (`rl.trainer_memory_fraction`, `sampler.memory_fraction`:
what `launch/plan.py --split` gives from the planner's rows, with room to spare at this size).

    python -m swerl_jax.train --config=experiments/testbed_gpu.py --workdir=runs/testbed_gpu
    python -m swerl_jax.sweep --config=experiments/testbed_gpu.py --sweep rl.max_staleness=0,1 --seeds 0 \\
        --share-sft --workdir sweeps/testbed_gpu        # synchronous vs one version stale, one SFT stage
    bash benchmarks/gpu_session.sh loop                  # the lent-GPU measurement (BENCHMARKS.md)
"""

from experiments import base, testbed_cpu


def get_config(arg: str | None = None):
    """testbed_gpu; `arg="smoke"`: a few steps of each stage (a plumbing check, on a CPU too)."""
    base.check_variant(arg, ("smoke",), "testbed_gpu.py")
    c = testbed_cpu.get_config()
    c.model.name = "testbed-512x8"
    c.model.dtype = "bfloat16"  # params and Adam moments stay float32
    c.mesh.name = "h100x1"  # one GPU (an H200 plans against the H100's 80 GB: conservative)
    c.data.synthetic_num_records = 4000
    c.sft.batch_size = 32
    c.sft.num_steps = 800
    c.sft.learning_rate = 1e-3
    c.sft.pack = False  # BENCHMARKS.md's GPU loop was measured with padded rows (testbed_cpu packs since issue 46)
    c.optim.warmup_steps = 50  # SFT's warmup (GRPO has its own, rl.warmup_steps)
    c.rl.prompts_per_step = 8
    c.rl.num_samples = 16
    c.rl.num_steps = 40
    c.sampler.max_batch = 128  # one step's answers in one batch
    c.rl.micro_batch_size = 32  # 4 micro-batches a step: the planner puts 128 sequences at 35 GiB of activations
    c.sampler.prompts_per_request = 2  # score a request's groups while the next request decodes
    c.reward.num_workers = 4
    # launch/plan.py --split on h100x1 (and h200x1): trainer rows 9.0 GiB (state 0.4, activations of a 32-sequence
    # micro-batch), sampler rows 0.66 GiB plus its 3 GiB headroom (tests/launch check that these are its figures).
    # Measured on an H200 (BENCHMARKS): the sampler held 3.6 GiB, the trainer 32.6 GiB by the driver's count.
    c.rl.trainer_memory_fraction = 0.84
    c.sampler.memory_fraction = 0.06
    c.eval.num_records = 200
    c.eval.every_steps = 20
    c.checkpoint.every_steps = 20
    c.logging.progress_bar = False
    if arg == "smoke":
        c.data.synthetic_num_records = 64
        c.sft.num_steps, c.sft.batch_size = 4, 8
        c.optim.warmup_steps = 0
        c.rl.num_steps, c.rl.prompts_per_step, c.rl.num_samples = 2, 2, 4
        c.sampler.max_new_tokens = 32
        c.eval.num_records, c.eval.every_steps = 4, 2
        c.checkpoint.every_steps = 2
    return c
