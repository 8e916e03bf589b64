"""Test-time scaling of an agent policy: `python -m swerl_jax.eval.tts --config=experiments/agent_tts.py[:arg]
--out DIR [--config.KEY=VALUE ...]` (swerl_jax/eval/tts.py; selectors and report in swerl_jax/eval/scaling.py).

Default arg: DeepSWE's setting (Qwen3-32B agent, K=16 trajectories per SWE-bench Verified instance, 100 turns at
64k context at test time; hybrid = execution-free verifier + execution-based tests). Unpublished here and ours:
the number of reproduction scripts, the verifier's training set and sizes. `:cpu`: the real SmolLM2-135M-Instruct
on three calibrated flask instances (SWE-bench Lite; gold resolves, empty does not: EVAL.md), K=4, short episodes:
the rates are ~0, the plumbing and the report are the point. `:tiny`: the suite's run (the demo's 7M model on
synthetic tasks, everything small).
"""

from ml_collections import ConfigDict


def get_config(arg: str | None = None) -> ConfigDict:
    """The test-time-scaling config; `arg` is None (DeepSWE scale), "cpu" or "tiny"."""
    if arg not in (None, "", "cpu", "tiny"):
        raise ValueError(f"agent_tts: unknown variant {arg!r} (use none, 'cpu' or 'tiny')")
    cpu, tiny = arg == "cpu", arg == "tiny"
    c = ConfigDict()
    c.policy = ("experiments/smollm2_cpu.py" if cpu else "experiments/tiny_cpu.py" if tiny
                else "experiments/deepswe_agent.py")
    c.hf_dir = ""  # a Hugging Face directory for the policy (e.g. eval.export's); "" = the experiment's own
    c.weights = ""  # WORKDIR/policy: the newest published policy version
    # evaluate the policy config's seeded random init when it has no weights (only when asked: the tiny smoke test)
    c.random_init = tiny
    c.instances = "synthetic" if tiny else "../shared/data/swebench_lite.json" if cpu else "swebench_verified.json"
    # the three flask Lite instances whose gold patches resolve and empty patches do not (EVAL.md's calibration)
    c.instance_ids = "pallets__flask-4045,pallets__flask-4992,pallets__flask-5063" if cpu else ""
    c.repos = "../shared/data/repos"
    c.synthetic_tasks = 2  # instances = "synthetic": this many held-out synthetic tasks
    c.k = 4 if (cpu or tiny) else 16
    c.temperature = 1.0
    c.max_turns = 2 if tiny else 5 if cpu else 100
    c.max_context = 1024 if tiny else 3072 if cpu else 65_536
    c.max_new_tokens = 64 if tiny else 256 if cpu else 8192  # per turn
    c.compact_prompt = tiny
    c.env_workers = 2 if (cpu or tiny) else 16
    c.instances_per_batch = 1 if cpu else 0  # instances whose K episodes share one kept-K/V session (0: all)
    c.step_timeout_s = 60.0
    c.episode_timeout_s = 1800.0
    c.test_timeout_s = 600.0
    c.seed = 0
    # execution-based verifier: reproduction scripts the policy writes (Agentless's prompt) + regression tests
    c.reproduction_tests = 1 if tiny else 2 if cpu else 8
    c.regression = not tiny  # synthetic tasks have no SWE-bench test spec
    c.test_max_new_tokens = 64 if tiny else 384 if cpu else 4096
    # execution-free verifier: the SFT trainer on the policy's labelled trajectories of other (synthetic) tasks
    c.verifier = ConfigDict()
    c.verifier.tasks = 2 if tiny else 3 if cpu else 256
    c.verifier.samples = 1 if tiny else 1 if cpu else 8  # policy trajectories per task (+ 1 scripted gold)
    c.verifier.num_steps = 3 if tiny else 4 if cpu else 500
    c.verifier.batch_size = 2 if tiny else 2 if cpu else 64
    c.verifier.micro_batch_size = 0 if tiny else 1 if cpu else 8
    c.verifier.learning_rate = 1e-3 if tiny else 2e-5 if cpu else 1e-5
    c.verifier.max_len = 1024 if tiny else 1024 if cpu else 32_768
    c.selectors = "execution,verifier,hybrid"
    return c
