"""swerl_jax.config: every wrong key or value fails before anything starts, naming the key."""

import json

import pytest

from experiments import base, tiny_cpu
from swerl_jax.config import unknown_config_keys
from swerl_jax.resolve import load_run_config, resolve_config, start_warnings, validate_config

from .conftest import REPO_ROOT


def test_unknown_keys_name_the_closest_valid_one():
    c = base.get_config()
    assert unknown_config_keys(c, ["--config.rl.num_step=2", "--config.mesh.shape.tensr=2", "--config.rl.kl_coef=0",
                                   "--config.mesh.shape.data", "--workdir=x", "--config.qqqqqq.zzzz"]) == [
        "unknown config key 'rl.num_step'; did you mean rl.num_steps?",
        "unknown config key 'mesh.shape.tensr'; did you mean mesh.shape.tensor?",
        "unknown config key 'qqqqqq.zzzz'"]


def _set(c, dotted, value):
    *path, last = dotted.split(".")
    node = c
    for part in path:
        node = node[part]
    node[last] = value
    return c


@pytest.mark.parametrize("key, value, message", [
    ("model.name", "llama-9000", "model.name='llama-9000' is not one of"),
    ("mesh.name", "h100x3", "mesh.name='h100x3' is not one of"),
    ("sampler.mode", "threads", "sampler.mode='threads' is not one of"),
    ("rl.old_logprobs", "cached", "rl.old_logprobs='cached' is not one of"),
    ("optim.schedule", "linear", "optim.schedule='linear' is not one of"),
    ("reward.kind", "python:no_such_module.fn", "reward.kind='python:no_such_module.fn': cannot import"),
    ("rl.loss_agg", "seq-sum", "rl.loss_agg"),
    ("rl.kl_estimator", "k4", "rl.kl_estimator"),
    ("rl.num_samples", 1, "rl.num_samples=1"),
    ("rl.micro_batch_size", 5, "rl.micro_batch_size"),
    ("model.hf_dir", "/no/such/model", "model.hf_dir='/no/such/model': no such directory"),
    ("data.train_files", "/no/such/records-*.array_record", "data.train_files: '/no/such/records-"),
    ("rl.seed", -2, "rl.seed must be >= 0, or -1 for `seed`, got -2"),
    ("rl.warmup_steps", -5, "rl.warmup_steps must be >= 0, or -1 for optim.warmup_steps, got -5"),
    # new-user check: these ran SFT first and failed when the sampler started, or skipped a stage silently
    ("sampler.temperature", -1.0, "sampler.temperature must be >= 0, got -1.0"),
    ("sampler.top_p", 0.0, "sampler.top_p must be in (0, 1], got 0.0"),
    ("sampler.top_k", -1, "sampler.top_k must be >= 0, got -1"),
    ("sampler.max_new_tokens", 0, "sampler.max_new_tokens must be >= 1, got 0"),
    ("rl.num_steps", -5, "rl.num_steps must be >= 0 (0: no such stage), got -5"),
    ("sft.num_steps", -1, "sft.num_steps must be >= 0 (0: no such stage), got -1"),
])
def test_each_wrong_value_is_named_before_anything_starts(key, value, message):
    c = _set(tiny_cpu.get_config(), key, value)
    with pytest.raises((ValueError, KeyError, FileNotFoundError)) as err:
        validate_config(c)
    assert message in str(err.value)


def test_the_planner_skips_the_file_checks():
    c = _set(tiny_cpu.get_config(), "data.train_files", "/no/such/records.jsonl")
    validate_config(c, check_files=False)
    validate_config(tiny_cpu.get_config())


# --- typed sections at the entry point (swerl_jax.resolve.resolve_config, as python -m swerl_jax.train calls it) ---

def _drop(c, dotted):
    section, field = dotted.split(".")
    d = c.to_dict()
    del d[section][field]
    return d


def _add(c, dotted, value):
    section, field = dotted.split(".")
    d = c.to_dict()
    d[section][field] = value
    return d


WRONG_CONFIGS = [
    ("unknown key", lambda c: _add(c, "rl.num_step", 3), KeyError, "unknown config key rl.num_step; did you mean "
                                                                    "rl.num_steps?"),
    ("unknown section", lambda c: {**c.to_dict(), "optimizer": {}}, KeyError, "unknown config key optimizer"),
    ("missing key", lambda c: _drop(c, "rl.kl_coef"), KeyError, "config key rl.kl_coef is missing"),
    ("string for an int", lambda c: _add(c, "rl.num_samples", "8"), TypeError,
     "config key rl.num_samples: expected an int, got str '8'"),
    ("bool for an int", lambda c: _add(c, "sft.batch_size", True), TypeError,
     "config key sft.batch_size: expected an int"),
    ("string for a float", lambda c: _add(c, "rl.kl_coef", "0.04"), TypeError,
     "config key rl.kl_coef: expected a number"),
    ("None for a string", lambda c: _add(c, "model.hf_dir", None), TypeError,
     "config key model.hf_dir: expected a string"),
    ("bad enum", lambda c: _add(c, "rl.seq_mean_rows", "some"), ValueError, "rl.seq_mean_rows='some' is not one of"),
    ("bad sampler mode", lambda c: _set(c, "sampler.mode", "threads"), ValueError, "sampler.mode='threads'"),
    ("bad dtype", lambda c: _set(c, "model.dtype", "fp8"), ValueError, "model.dtype='fp8' is not one of"),
    ("bad advantage", lambda c: _set(c, "rl.advantage", "reinforced"), ValueError,
     "rl.advantage='reinforced' is not one of"),
    ("bad error credit", lambda c: _set(c, "agent.error_credit", "turn"), ValueError,
     "agent.error_credit='turn' is not one of"),
    ("zero disk quota", lambda c: _set(_set(c, "rl.task", "agent"), "agent.disk_mb", 0), ValueError,
     "agent.disk_mb must be >= 1, got 0"),
    ("string sandbox memory", lambda c: _add(c, "agent.memory_mb", "8g"), TypeError,
     "config key agent.memory_mb: expected an int"),
    ("bad attention kernel", lambda c: _set(c, "model.attention_impl", "flash"), ValueError,
     "model.attention_impl='flash'"),
    ("negative KL", lambda c: _set(c, "rl.kl_coef", -0.1), ValueError, "rl.kl_coef must be >= 0"),
    ("zero update epochs", lambda c: _set(c, "rl.update_epochs", 0), ValueError, "rl.update_epochs must be >= 1"),
    ("mesh / batch", lambda c: _set(_set(c, "mesh.name", "h100x8"), "rl.micro_batch_size", 4), ValueError,
     "rl.micro_batch_size: a micro-batch of 4 sequences does not split over the 8 batch shards"),
    ("missing file", lambda c: _set(c, "data.train_files", "/no/such/prs.jsonl"), FileNotFoundError,
     "data.train_files"),
    ("missing tokenizer", lambda c: _set(c, "model.tokenizer", "/no/tok"), ValueError,
     "model.tokenizer='/no/tok': no such directory"),
]


@pytest.mark.parametrize("what, make, error, message", WRONG_CONFIGS, ids=[w[0] for w in WRONG_CONFIGS])
def test_entry_point_names_the_key_before_any_compile(what, make, error, message):
    import time

    import jax

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **kw: compiles.append(event) if "compile" in event else None)
    t0 = time.perf_counter()
    with pytest.raises(error) as err:
        resolve_config(make(tiny_cpu.get_config()))
    elapsed = time.perf_counter() - t0
    assert message in str(err.value)
    assert compiles == [], compiles  # nothing traced or compiled: the check is config-only
    print(f"{what}: refused in {elapsed * 1e3:.1f} ms")  # reported, never asserted (machine load)


def test_resolved_sections_are_typed_and_round_trip_through_json():
    c = tiny_cpu.get_config()
    c.rl.kl_coef = 0  # ConfigDict keeps float fields float; a plain dict from JSON may carry an int
    d = c.to_dict()
    d["rl"]["kl_coef"] = 0
    exp = resolve_config(d)
    assert exp.rl.kl_coef == 0.0 and isinstance(exp.rl.kl_coef, float)
    assert resolve_config(json.loads(exp.to_json())) == exp
    assert json.loads(exp.to_json()) == json.loads(resolve_config(tiny_cpu.get_config()).to_json())


def test_a_run_directory_from_before_a_new_key_still_loads(tmp_path):
    """load_run_config: an older run's config.json lacks keys added since (here the eval section): base's values
    fill them, everything the run wrote is kept, and a typo the run could not have written still fails."""
    old = json.loads(tiny_cpu.get_config().to_json())
    del old["eval"]
    old["rl"]["kl_coef"] = 0.5
    (tmp_path / "config.json").write_text(json.dumps(old))
    exp = load_run_config(tmp_path)
    assert exp.eval.every_steps == base.get_config().eval.every_steps and exp.rl.kl_coef == 0.5
    old["rl"]["kl_coeff"] = 1.0
    (tmp_path / "config.json").write_text(json.dumps(old))
    with pytest.raises(KeyError, match="unknown config key rl.kl_coeff"):
        load_run_config(tmp_path)


def test_start_warnings_name_an_idle_sampler_fleet_and_the_decoupled_objective():
    """Issue 46 items 5 and 13: settings that run but will not do what they seem say so, once, at start."""
    c = tiny_cpu.get_config()  # 1 prompt per request x 8 samples: one engine batch of 64 rows
    assert start_warnings(resolve_config(c)) == []
    c.sampler.num_processes = 2
    (line,) = start_warnings(resolve_config(c))
    assert line.startswith("sampler.num_processes=2: ") and "\n" not in line
    assert "1 engine batch" in line and "1 of the 2 sampler processes will never serve a request" in line
    assert "sampler.prompts_per_request=1" in line and "sampler.max_batch=64" in line
    # computed, not assumed: a request of 16 prompts x 8 samples is 2 batches of 8 prompts, one per process
    c.sampler.prompts_per_request, c.rl.prompts_per_step = 0, 16
    assert start_warnings(resolve_config(c)) == []
    c.sampler.num_processes = 3
    (line,) = start_warnings(resolve_config(c))
    assert "2 engine batches" in line and "1 of the 3 sampler processes" in line
    c.sampler.num_processes = 1
    c.rl.off_policy = "decoupled"
    (line,) = start_warnings(resolve_config(c))
    assert line.startswith("rl.off_policy='decoupled' with one update per batch") and "never acts" in line
    c.rl.ppo_minibatches = 4  # as AReaL runs it (issue 47's testbed comparison): its clip acts from update 2
    assert start_warnings(resolve_config(c)) == []
    c.rl.ppo_minibatches = 1
    c.rl.num_steps = 0  # no GRPO stage: nothing of the kind runs
    assert start_warnings(resolve_config(c)) == []


# --- --config.KEY=VALUE on every entry point (swerl_jax.config.split_overrides / apply_overrides) ---


def test_overrides_are_split_typed_and_named():
    from swerl_jax.config import apply_overrides, split_overrides

    rest, found = split_overrides(["--config", "x.py", "--config.rl.kl_coef=0.5", "--out", "D",
                                   "--config.sampler.mode", "inline", "--config.logging.progress_bar=false"])
    assert rest == ["--config", "x.py", "--out", "D"]
    assert found == [("rl.kl_coef", "0.5"), ("sampler.mode", "inline"), ("logging.progress_bar", "false")]
    c = tiny_cpu.get_config()
    assert apply_overrides(c, found) == {"rl.kl_coef": 0.5, "sampler.mode": "inline", "logging.progress_bar": False}
    assert (c.rl.kl_coef, c.sampler.mode, c.logging.progress_bar) == (0.5, "inline", False)
    with pytest.raises(KeyError, match="unknown config key rl.num_step; did you mean rl.num_steps"):
        apply_overrides(c, [("rl.num_step", "3")])
    with pytest.raises(ValueError, match="rl.num_steps='three': expected an int"):
        apply_overrides(c, [("rl.num_steps", "three")])
    with pytest.raises(ValueError, match="--config.rl.num_steps: expected --config.rl.num_steps=VALUE"):
        split_overrides(["--config.rl.num_steps"])


def test_an_override_of_a_whole_section_names_its_fields():
    """`--config.rl=3` read as ml_collections' "3 is of original type str ... cannot be casted to ConfigDict"."""
    from swerl_jax.config import apply_overrides

    with pytest.raises(ValueError, match=r"config key 'rl' is a section, not a value: set one of its fields, "
                                         r"--config.rl.FIELD=VALUE \(FIELD: advantage, .*, \.\.\. \(\d+ in all\)\)$"):
        apply_overrides(tiny_cpu.get_config(), [("rl", "3")])
    assert unknown_config_keys(base.get_config(), ["--config.mesh.shape=2"]) == [
        "config key 'mesh.shape' is a section, not a value: set one of its fields, --config.mesh.shape.FIELD=VALUE "
        f"(FIELD: {', '.join(sorted(base.get_config().mesh.shape.keys()))})"]


def test_a_registry_name_gets_a_did_you_mean_past_dashes_and_case():
    """`model.name=demo7m` listed 18 names but not the one meant: difflib alone missed `demo-7m`."""
    for typed, meant in (("demo7m", "demo-7m"), ("Qwen3_0.6B", "qwen3-0.6b"), ("smolm2-135m", "smollm2-135m")):
        with pytest.raises(ValueError, match=f"did you mean '{meant}'"):
            validate_config(_set(tiny_cpu.get_config(), "model.name", typed))


@pytest.mark.parametrize("module", ["swerl_jax.eval.run", "swerl_jax.eval.tts", "swerl_jax.eval.repair_score"])
def test_every_config_entry_point_names_a_wrong_override_key(module, tmp_path):
    """eval run, test-time scaling and repair-score take `--config.KEY=VALUE` as train does; a wrong key is one
    KeyError (one line through `cli.run_cli`) naming it and the closest key, before anything loads."""
    import importlib

    config = {"swerl_jax.eval.run": "experiments/eval_agentless_mini.py:cpu",
              "swerl_jax.eval.tts": "experiments/agent_tts.py:tiny",
              "swerl_jax.eval.repair_score": "experiments/tiny_cpu.py"}[module]
    argv = ["--config", config, "--out", str(tmp_path / "out"), "--config.sed=1"]
    if module.endswith("repair_score"):
        argv += ["--records", str(tmp_path)]
    with pytest.raises(KeyError, match="unknown config key sed; did you mean seed"):
        importlib.import_module(module).main(argv)


def test_a_config_path_without_py_or_with_a_typo_gets_a_did_you_mean():
    from swerl_jax.config import load_experiment_config

    with pytest.raises(FileNotFoundError, match=r"no such config file 'experiments/tiny_cpu' \(did you mean "
                                                r"experiments/tiny_cpu.py\?\)"):
        load_experiment_config("experiments/tiny_cpu")
    with pytest.raises(FileNotFoundError, match=r"did you mean experiments/swerl_llama3_70b.py\?"):
        load_experiment_config("experiments/swerl_llama3_7b.py:paper")


@pytest.mark.parametrize("module", ["swerl_jax.train", "swerl_jax.eval.repair_score"])
@pytest.mark.parametrize("name,text,said", [
    ("noget.py", "X = 1\n", "defines no get_config(arg)"),
    ("adict.py", "def get_config(arg=None):\n    return {'rl': {}}\n", "get_config() returned a dict, not an "
                                                                      "ml_collections.ConfigDict"),
    ("config.json", "{}", "is not an experiment file (a .py defining get_config(arg)): a run's config.json"),
])
def test_a_config_file_that_is_not_an_experiment_is_one_line_naming_it(tmp_path, module, name, text, said):
    """Day-three check: a --config file without get_config (or returning a dict) ended in an AttributeError
    traceback, and a run's config.json (which exists) was "no such config file"."""
    import subprocess
    import sys

    (tmp_path / name).write_text(text)
    extra = ["--workdir", str(tmp_path / "w")] if module == "swerl_jax.train" else \
        ["--records", str(tmp_path), "--out", str(tmp_path / "w")]
    proc = subprocess.run([sys.executable, "-m", module, f"--config={tmp_path / name}", *extra],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and f"{tmp_path / name}" in lines[0] and said in lines[0], \
        proc.stderr[-2000:]
    assert not (tmp_path / "w").exists()
