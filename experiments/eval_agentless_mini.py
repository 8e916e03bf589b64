"""Agentless Mini evaluation: `python -m swerl_jax.eval run --config=experiments/eval_agentless_mini.py[:cpu]
--out DIR [--config.KEY=VALUE ...]`.

The policy comes from `policy` (an experiment file: its model, tokenizer and sampler limits) and `backend`:
`engine` (in process: `weights` = WORKDIR/policy for a published version, `hf_dir` for a Hugging Face directory
such as `eval.export`'s, else the experiment's own `model.hf_dir`), `sampler` (a running sampler server at
`address`), `openai` (any OpenAI-compatible endpoint: a vLLM server, an API) or `oracle` (the gold patches: checks
the scaffold, not a model). Predictions go to OUT/predictions.jsonl; with `grade`, the harness grades them into
OUT/harness/report.json.

The paper's setting (the default arg): the release's 500 localization and repair samples at temperature 1.0 (its
README; unpublished here: the split between reproduction tests and regression is ours), 60k-token repair budget.
`:cpu`: SmolLM2-135M on CPU, 2 samples of each, a 2k-token repair budget, a few Lite flask instances.
"""

from ml_collections import ConfigDict


def get_config(arg: str | None = None) -> ConfigDict:
    """The evaluation config; `arg` is None (paper scale) or "cpu"."""
    if arg not in (None, "", "cpu"):
        raise ValueError(f"eval_agentless_mini: unknown variant {arg!r} (use none or 'cpu')")
    cpu = arg == "cpu"
    c = ConfigDict()
    c.policy = "experiments/smollm2_cpu.py" if cpu else "experiments/swerl_llama3_70b.py"
    c.backend = "engine"  # engine | sampler | openai | oracle
    c.weights = ""  # engine: WORKDIR/policy (the newest published version unless `version`)
    c.version = -1
    c.hf_dir = ""  # engine: a Hugging Face directory (tokenizer too)
    c.address = ""  # sampler: HOST:PORT
    c.openai_base_url = "http://127.0.0.1:8000/v1"
    c.openai_model = ""
    c.openai_api_key_env = "OPENAI_API_KEY"
    c.max_new_tokens = 512 if cpu else 8192
    c.max_prompt_len = 4096 if cpu else 65_536  # the engine's prompt limit (longer prompts are answered "")
    c.instances = "../shared/data/swebench_lite.json"
    c.instance_ids = "pallets__flask-4045,pallets__flask-4992" if cpu else ""  # comma-separated; "" = all
    c.repos = "../shared/data/repos"
    # the predictions' model_name_or_path; "" = named after what is evaluated (WEIGHTS@vN, the hf_dir folder, ...)
    c.model_name = ""
    c.seed = 0
    c.agentless = ConfigDict()
    c.agentless.num_samples = 2 if cpu else 500
    c.agentless.temperature = 1.0
    c.agentless.max_input_tokens = 2048 if cpu else 60_000
    c.agentless.thinking = True
    c.agentless.reproduction_tests = 1 if cpu else 40
    c.agentless.regression = True
    c.grade = True
    # with grade: skip instances out of reach of this machine before generating (eval/precheck.py): "static"
    # (conda, a missing interpreter; no build), "grade_empty" (also grades each empty patch first: network,
    # compiler; one grading per instance, its env then cached for the real grading: the CPU variant's few
    # instances), "off"
    c.precheck = "grade_empty" if cpu else "static"
    c.harness_workers = 2
    c.test_timeout_s = 1800
    # unpinned requirements of the test environments as of each instance's created_at; "images": as of 2024-06-27,
    # the official images' build day, for every instance; "off": today's index
    c.index_cutoff = "created_at"
    return c
