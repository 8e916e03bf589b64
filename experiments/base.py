"""The base config every experiment builds on.

Every field that changes results lives here (nothing hidden in code). Experiments import `get_config`,
change a few fields and return it; any field can be overridden on the command line:

    python -m swerl_jax.train --config=experiments/tiny_cpu.py --config.rl.num_samples=8

Unpublished SWE-RL hyper-parameters (lr, beta, epsilon, temperature, max new tokens) take the peers' values
(lr 1e-6, beta 0.04, epsilon 0.2, temperature 1.0) and are marked "not published" below.
"""

from __future__ import annotations

import ml_collections


def check_variant(arg: str | None, variants: tuple[str, ...], experiment: str) -> None:
    """Raise ValueError naming the valid variants when `arg` (the `:arg` of `--config=FILE:arg`) is unknown.

    An unknown variant used to fall back silently to the default config (a typo ran the wrong experiment).
    """
    if arg and arg not in variants:
        raise ValueError(f"{experiment}: unknown variant {arg!r}; valid: {list(variants) or 'none'}")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The default config; takes no variant (`arg` must be None or empty)."""
    check_variant(arg, (), "base.py")
    c = ml_collections.ConfigDict()
    c.seed = 0

    # Model: a registry name from swerl_jax.model.config plus overrides; `hf_dir` loads pretrained weights.
    c.model = ml_collections.ConfigDict()
    c.model.name = "tiny"
    c.model.hf_dir = ""  # Hugging Face directory (config.json + safetensors); empty: random init
    c.model.tokenizer = ""  # tokenizer directory; empty: model.hf_dir, else SmolLM2-135M-Instruct's (vocab 49,152)
    c.model.param_dtype = "float32"
    c.model.dtype = "float32"
    c.model.remat = "none"  # none | full | a jax.checkpoint_policies name (e.g. dots_with_no_batch_dims_saveable)
    c.model.attention_impl = ml_collections.config_dict.placeholder(str)  # None (XLA) | cudnn | cudnn_masked | pallas

    # Device mesh: axis sizes (-1: the rest of the devices) and how the DCN (across nodes/slices) splits.
    c.mesh = ml_collections.ConfigDict()
    c.mesh.name = "cpu"  # a named mesh from swerl_jax.meshes; the fields below override it when set
    c.mesh.shape = ml_collections.ConfigDict({"data": 1, "fsdp": -1, "tensor": 1})
    c.mesh.dcn_shape = ml_collections.ConfigDict({"data": 1, "fsdp": 1, "tensor": 1})
    c.mesh.logical_axis_rules = ()  # empty: swerl_jax.sharding.DEFAULT_RULES
    # Multi-process runs (swerl_jax.sharding.initialize_distributed): empty/0/-1 = from the environment
    # (JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID, SLURM or Cloud TPU auto-detection).
    c.mesh.coordinator_address = ""
    c.mesh.num_processes = 0
    c.mesh.process_id = -1

    # Data: PR records and the prompt.
    c.data = ml_collections.ConfigDict()
    c.data.train_files = ""  # comma-separated JSONL/ArrayRecord files; empty: synthetic records
    c.data.synthetic_num_records = 256
    c.data.synthetic_repos = ""  # comma-separated owner/name the synthetic records come from; empty: six made-up
    # Which generator makes the synthetic records: "synthetic" (data/synthetic.py: 7 single-file bug kinds, the
    # demo's) or "testbed" (swerl_jax/testbed: 20 bug families over generated multi-file packages, hidden tests).
    c.data.generator = "synthetic"
    c.data.testbed_families = ""  # comma-separated testbed families to train on; empty: every family
    c.data.testbed_max_distractors = 2  # unrelated modules per testbed task (0-2 keep compact prompts < 512 tokens)
    c.data.testbed_package = ""  # one package name for every testbed task; empty: a generated name per task
    c.data.max_prompt_len = 1024
    # GRPO on the first N records only (0: all); the SFT stage still uses every record. A set no larger than
    # rl.prompts_per_step x a few steps makes each step revisit the same prompts (the CPU demo).
    c.data.rl_num_records = 0
    c.data.shuffle = True
    c.data.num_epochs = -1  # -1: repeat forever
    c.data.worker_count = 0  # Grain worker processes for tokenisation (0: in the main process)
    c.data.prompt_style = "swe_rl"  # the SWE-RL system + repair prompt

    # Reward: the SWE-RL patch-similarity reward.
    c.reward = ml_collections.ConfigDict()
    c.reward.kind = "continuous"  # continuous | discrete | python:module.function
    c.reward.num_workers = 2
    c.reward.timeout_s = 10.0  # per item; past it the item gets fallback_reward
    c.reward.fallback_reward = -1.0

    # Sampler: the separate generation process.
    c.sampler = ml_collections.ConfigDict()
    c.sampler.mode = "process"  # process (separate sampler server) | inline (same process, for debugging)
    c.sampler.host = "127.0.0.1"
    c.sampler.port = 0  # 0: pick a free port
    c.sampler.temperature = 1.0  # not published
    c.sampler.top_p = 1.0
    c.sampler.top_k = 0
    c.sampler.max_new_tokens = 256  # not published (paper context 16k)
    c.sampler.max_batch = 64
    # Prompts per sampler request (0: the step's prompts in one). Smaller requests let the reward service score
    # earlier groups while later ones are generated, at the cost of smaller decode batches.
    c.sampler.prompts_per_request = 0
    c.sampler.request_timeout_s = 600.0
    # > 1: a fleet of sampler processes, each on its share of sampler.cpus/devices; a request is dealt out by engine
    # batches, so processes beyond a request's batches stay idle (a run says so at start)
    c.sampler.num_processes = 1
    c.sampler.cpus = ""  # cores the sampler process runs on, e.g. "0" ("": any), so it and the trainer don't share
    # GPUs the sampler processes run on (CUDA_VISIBLE_DEVICES, physical ids), split like sampler.cpus: e.g. "6-7"
    # with the trainer launched on 0-5 ("": the trainer's own, shared). launch/gpu_node_async.sh places both.
    c.sampler.devices = ""
    # Share of each GPU's memory a sampler process takes (XLA_PYTHON_CLIENT_MEM_FRACTION of its environment; 0: the
    # runtime's default, 0.75). Where the sampler shares the trainer's GPUs (sampler.devices=""), this and
    # rl.trainer_memory_fraction must split the memory: launch/plan.py prints a split from its rows.
    c.sampler.memory_fraction = 0.0
    c.sampler.weights_dir = ""  # where policy versions are published; empty: workdir/policy
    # Partial rollouts in the sampler process (AReaL, slime --partial-rollout): a policy version published while a
    # request decodes is taken between two segments of sampler.partial_segment tokens, without draining; the rows
    # in flight are re-prefilled under it and every token records its version (Completion.token_versions, the
    # per-token staleness). Off: the static engine, today's completions.
    c.sampler.partial_rollouts = False
    c.sampler.partial_segment = 32

    # RL: GRPO and its ablations.
    c.rl = ml_collections.ConfigDict()
    # repair: SWE-RL (one answer per prompt, the patch-similarity reward) | agent: multi-turn tool use in sandboxed
    # repositories (DeepSWE-style; the `agent` section below)
    c.rl.task = "repair"
    c.rl.num_steps = 1600
    c.rl.prompts_per_step = 32
    c.rl.num_samples = 16  # G rollouts per prompt
    c.rl.advantage = "grpo"  # grpo | drgrpo (no std) | loo (leave-one-out)
    c.rl.std_eps = 1e-6  # not published
    c.rl.std_ddof = 0  # not published (population std, as TRL/verl)
    c.rl.clip_eps_low = 0.2  # not published
    c.rl.clip_eps_high = 0.2  # 0.28 for DeepSWE clip-high
    # 0: off, else c (e.g. 3.0). For A < 0 nothing else bounds a token's weight (the PPO clip only floors the ratio):
    # at k = 0 with one update the ratio is 1 and c never acts (0 here: the papers', and `make demo`'s); at
    # rl.max_staleness >= 1 plain's ratio is against a stale behaviour policy (14.1 seen), so the asynchronous
    # experiments (experiments/ablations/async_grpo.py) use 3.0 on every arm. `neg_adv_weight_max` logs it.
    c.rl.dual_clip = 0.0
    c.rl.kl_coef = 0.04  # beta, not published; 0: the reference model is not loaded
    c.rl.kl_estimator = "k3"  # k1 | k2 | k3
    c.rl.loss_agg = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm
    # Where the functions a user registered (register_advantage / register_kl / register_loss_agg, in an experiment
    # file or their own module) and this config names are imported from in other processes (the sampler server
    # reads config.json): module names or .py paths. Filled when the config is resolved in the process that
    # registered them (swerl_jax/rl/registry.py); () for the built-in names.
    c.rl.imports = ()
    c.rl.loss_norm = 0  # normaliser for seq-mean-token-sum-norm; 0: sampler.max_new_tokens
    c.rl.entropy_coef = 0.0
    c.rl.compact_filtering = False  # mask completions that hit max_new_tokens
    # What a sequence-mean loss_agg divides by: "active" rows with a counted token (ours; filtered rows do not
    # dilute the mean) | "all" rows, filtered ones adding 0 (DeepSWE's verl fork; upstream verl sums rows / norm).
    c.rl.seq_mean_rows = "active"
    # True: compact-filtered (truncated) samples stay out of their group's advantage baseline (DeepSWE: masked
    # trajectories get no final reward); False: their real rewards count in the group mean/std (ours).
    c.rl.baseline_excludes_filtered = False
    # DAPO's dynamic sampling: drop groups whose counted rewards are all equal (no gradient) and draw the next
    # prompts until the step holds rl.prompts_per_step groups, at most this many draws per step (then filled with
    # dropped groups); dynamic/* counts every draw and drop (swerl_jax/rl/dynamic.py). Off: one draw per step.
    c.rl.dynamic_sampling = False
    c.rl.dynamic_sampling_max_draws = 4
    c.rl.old_logprobs = "sampler"  # sampler | recompute
    # plain: ratio vs old log-probs | decoupled: AReaL's decoupled PPO (stale batches; with rl.ppo_minibatches > 1,
    # where its clip acts: a run with one update per batch warns at start; see rl.max_staleness)
    c.rl.off_policy = "plain"
    c.rl.behav_weight_cap = 5.0  # decoupled: drop tokens with pi_prox / pi_behav above it (AReaL examples); 0: no cap
    # Sampler/trainer mismatch correction, per token, on w = pi_trainer / pi_sampler (the trainer's params before the
    # update; swerl_jax/rl/correction.py): off | tis (loss x min(w, cap)) | mis (loss x w, tokens with w > cap
    # dropped). Under "decoupled" it replaces the behaviour weight. Logged: mismatch_ratio_mean/max, *_frac.
    c.rl.mismatch_correction = "off"
    c.rl.mismatch_cap = 2.0  # C > 1; read only when the correction is on
    c.rl.micro_batch_size = 0  # 0: the whole step's batch at once
    c.rl.update_epochs = 1  # optimizer updates on each step's batch (GRPO's mu; the paper: one per step)
    # Sequential optimizer updates per epoch, each on 1/n of the batch with the old and proximal log-probs fixed
    # (AReaL's ppo_n_minibatches, 4 there): from the second on the clip bounds the move since the proximal policy.
    # 1: one update per batch (the papers'); swerl_jax/rl/minibatch.py says how the loss is normalised.
    c.rl.ppo_minibatches = 1
    # Asynchronous RL: 0 is the synchronous loop (the papers'); k >= 1 collects step t + 1 while step t trains,
    # from policy versions >= t - k (swerl_jax/rl/producer.py). On the testbed (ABLATIONS.md, 6 RL seeds) k = 1 with
    # "plain" and with "decoupled" + rl.ppo_minibatches=4 were both as good as k = 0 (within +-2.5 points resolved),
    # none collapsing; the asynchronous ablation (experiments/ablations/async_grpo.py) also sets rl.dual_clip=3 on
    # every arm, since at k >= 1 plain's ratio to a stale behaviour policy is otherwise unbounded.
    c.rl.max_staleness = 0
    c.rl.trainer_memory_fraction = 0.0  # the trainer process's share of each GPU (see sampler.memory_fraction)
    c.rl.trainer_cpus = ""  # cores the trainer process runs on, e.g. "1" ("": any); see sampler.cpus
    # The GRPO stage's own seed (its prompt order and sampling keys); -1: `seed`. Only the GRPO stage reads it, so
    # runs that differ in it share one SFT stage (`sweep --seed-key rl.seed --share-sft`: RL seeds from one SFT
    # policy, as the paper's arms start from one base model). Model init, the records and held-out tasks keep `seed`.
    c.rl.seed = -1
    # GRPO's own learning-rate warmup in updates (-1: optim.warmup_steps, which the SFT stage reads too). A fresh
    # Adam's first update moves every weight by about the learning rate whatever the gradient's size, which can
    # wreck a small SFT'd policy at once; a warmup set here leaves the SFT stage (and its sharing) untouched.
    c.rl.warmup_steps = -1

    # Optimiser (shared by RL and SFT).
    c.optim = ml_collections.ConfigDict()
    c.optim.learning_rate = 1e-6  # not published
    c.optim.warmup_steps = 0  # not published
    c.optim.schedule = "constant"  # constant | cosine; not published
    c.optim.b1 = 0.9  # not published
    c.optim.b2 = 0.999  # not published
    c.optim.weight_decay = 0.0  # not published
    c.optim.grad_clip = 1.0  # not published
    c.optim.grad_accum_steps = 1
    c.optim.eps = 1e-8  # Adam epsilon
    c.optim.final_lr_ratio = 0.0  # cosine decays to learning_rate * this
    c.optim.skip_nonfinite = 0  # n > 0: skip updates with NaN/Inf gradients, at most n in a row (0: off)

    # SFT baseline.
    c.sft = ml_collections.ConfigDict()
    c.sft.num_steps = 0
    c.sft.batch_size = 32
    c.sft.max_len = 2048
    c.sft.learning_rate = 1e-5
    c.sft.micro_batch_size = 0  # sequences per micro-batch (gradient accumulation); 0: the whole batch at once
    c.sft.prompt_loss_weight = 0.0  # > 0: the prompt's tokens join the loss with this weight (0: answer only)
    # True: whole examples packed side by side into rows (batching.pack_segments; attention within an example),
    # the same loss on fewer padded tokens (the CPU testbed's SFT steps: BENCHMARKS.md "The testbed's first hour")
    c.sft.pack = False

    # Agentic RL (rl.task = "agent"): episodes in sandboxed checkouts with R2E-Gym's tools (swerl_jax/agent/).
    # Synthetic tasks (data.synthetic_num_records, data.synthetic_repos: bugs with hidden unit tests) unless
    # agent.instances names SWE-bench instances (then agent.repos holds their clones). data.rl_num_records limits
    # GRPO to the first N tasks; data.max_prompt_len must hold agent.max_context; sampler.max_new_tokens is per turn.
    c.agent = ml_collections.ConfigDict()
    c.agent.instances = ""  # SWE-bench instances (JSON list or JSONL); empty: synthetic tasks
    c.agent.repos = ""  # clones of agent.instances' repositories (owner__name, .git or .bundle)
    c.agent.reward = "execution"  # execution (hidden tests: 1 or 0) | similarity (SWE-RL's reward of the diff)
    c.agent.max_turns = 30
    c.agent.max_context = 32768  # tokens of the whole conversation (DeepSWE: 32k)
    c.agent.timeout_s = 1800.0  # an episode's wall clock
    c.agent.step_timeout_s = 120.0  # one tool call's wall clock
    c.agent.env_workers = 8  # threads stepping environments (each tool call is a sandboxed process)
    c.agent.waves = 1  # >1: split the groups so one wave's environments step while the next generates
    # >= 1 (with rl.max_staleness >= 1): stream episodes across steps, this many task batches beyond the step's in
    # flight; a step trains on the first rl.prompts_per_step groups to finish (swerl_jax/agent/stream.py). 0: off
    c.agent.stream_ahead_batches = 0
    c.agent.compact_prompt = False  # the tools' syntax only (tiny CPU policies) instead of the full descriptions
    c.agent.kv_cache = "reprefill"  # reprefill: each turn's whole context to the sampler | kept (inline sampler)
    c.agent.eval_tasks = 16  # held-out tasks evaluated greedily every eval.every_steps (the first N)
    # SWE-bench-shaped held-out instances (e.g. `python -m swerl_jax.tasks generate`'s heldout.jsonl, their clones in
    # agent.repos) evaluated instead of synthetic tasks of another seed; empty: synthetic
    c.agent.eval_instances = ""
    # which model tokens carry an episode's advantage: episode (all of them: DeepSWE) | until_error (a below-
    # baseline episode's tokens after its first failed tool call are left out of the loss; agent/trainer.py)
    c.agent.error_credit = "episode"
    # True: the execution reward scores a patch that changes how tests run (conftest.py, pytest/tox settings,
    # sitecustomize/usercustomize, .pth; swerl_jax/reward/test_infra.py) as unresolved: such a patch can pass the
    # hidden tests without a fix, and RL learns whatever passes. False keeps the grader's verdict (SWE-bench's
    # official one); either way agent/resolved_test_infra_rate reports how many resolved episodes touched them.
    c.agent.test_infra_unresolved = False
    # The sandbox's limits for every command an episode runs and its grading (SECURITY.md: how each is enforced,
    # what the model sees when it hits one); the step's wall clock is agent.step_timeout_s.
    c.agent.memory_mb = 8192  # address space of a command (RLIMIT_AS)
    c.agent.processes = 512  # processes of one sandbox (RLIMIT_NPROC, a per-sandbox uid)
    c.agent.disk_mb = 4096  # an episode's work dir (checkout, venv, what it writes): polled, a command killed past it
    c.agent.file_mb = 1024  # the largest file a command can write (RLIMIT_FSIZE)
    c.agent.tmp_mb = 512  # the private /tmp (a tmpfs: host memory)
    c.agent.shm_mb = 64  # the private /dev/shm (a tmpfs: host memory)

    # Held-out evaluation during GRPO: the oracle-file repair metric (swerl_jax/eval/repair_score.py: format rate,
    # score, exact fixes), greedy, on records the run does not train on; logged as eval/* every N steps and at the
    # last step. It changes nothing the run computes (rundir treats eval.* as operational).
    c.eval = ml_collections.ConfigDict()
    c.eval.every_steps = 0  # 0: off
    c.eval.records = ""  # PR record files (paths as data.train_files); empty: synthetic records of another seed
    c.eval.num_records = 16  # the first N of them
    c.eval.heldout_seed = 1000  # synthetic held-out records use seed + this (never the training records' seed)
    # testbed: the held-out tasks' families (comma-separated); empty: data.testbed_families (the same families,
    # unseen instances). Families the run never trained on ask whether a fix transfers to a new kind of bug.
    c.eval.families = ""
    # The reward that scores held-out answers (the repair score's): one metric for every run, whatever reward.kind
    # it trains with, so a continuous-vs-discrete ablation compares the same number (it used to be reward.kind: the
    # discrete arm's "score" was its exact-match rate).
    c.eval.reward_kind = "continuous"

    # Checkpoints.
    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every_steps = 50
    c.checkpoint.max_to_keep = 3
    c.checkpoint.async_save = True

    # Logging.
    c.logging = ml_collections.ConfigDict()
    c.logging.every_steps = 1
    c.logging.tensorboard = True
    c.logging.save_rollouts = True
    c.logging.progress_bar = True
    return c
