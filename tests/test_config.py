"""swerl_jax.config: every wrong key or value fails before anything starts, naming the key."""

import pytest

from experiments import base, tiny_cpu
from swerl_jax.config import unknown_config_keys, validate_config


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
