"""The sampler server reads weights once: given a published policy version it starts from it (shapes from the
model config, not from loading `model.hf_dir` or initialising params), and its first request does not re-read it."""

from __future__ import annotations

import jax
import numpy as np

from experiments import tiny_cpu
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.policy import model_config_from
from swerl_jax.sampler import factory, weights
from swerl_jax.sampler import server as server_mod


def _config():
    config = tiny_cpu.get_config()
    config.model.name = "tiny"
    config.sampler.max_batch, config.sampler.max_new_tokens, config.data.max_prompt_len = 2, 4, 16
    return config


def _spy(monkeypatch, calls: dict):
    """Count weight reads: published versions, HF directories and concrete (not shape-only) random inits."""
    load, load_hf, init = factory.load, factory.load_hf, factory.init_params

    def spy_load(directory, version, like=None):
        calls.setdefault("load", []).append(version)
        return load(directory, version, like)

    def spy_load_hf(*a, **k):
        calls.setdefault("load_hf", []).append(a)
        return load_hf(*a, **k)

    def spy_init(cfg, key):
        if not isinstance(key, jax.core.Tracer):  # jax.eval_shape traces it: shapes only, no weights
            calls.setdefault("init", []).append(key)
        return init(cfg, key)

    monkeypatch.setattr(factory, "load", spy_load)
    monkeypatch.setattr(factory, "load_hf", spy_load_hf)
    monkeypatch.setattr(factory, "init_params", spy_init)
    monkeypatch.setattr(weights, "load", spy_load)  # the watcher's reads


def test_published_version_is_the_only_weights_read(tmp_path, monkeypatch):
    config = _config()
    params = jax.tree.map(lambda x: x * 0.5, init_params(get_model_config("tiny"), jax.random.PRNGKey(7)))
    weights.publish(tmp_path / "policy", params, 3)
    calls: dict = {}
    _spy(monkeypatch, calls)
    server = server_mod.server_from_config(config, host="127.0.0.1", port=0, secret=None,
                                           weights_dir=str(tmp_path / "policy"), with_tokenizer=False)
    try:
        assert calls == {"load": [3]}
        assert server.engine.policy_version == 3
        for a, b in zip(jax.tree.leaves(server.engine.params), jax.tree.leaves(params), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        server.refresh_weights()  # what every request does first: version 3 is already in memory
        assert calls == {"load": [3]}
        weights.publish(tmp_path / "policy", jax.tree.map(lambda x: -x, params), 4)
        server.refresh_weights()
        assert calls == {"load": [3, 4]} and server.engine.policy_version == 4
    finally:
        server.shutdown()


def test_without_a_published_version_the_seeded_init_is_used_once(tmp_path, monkeypatch):
    calls: dict = {}
    _spy(monkeypatch, calls)
    server = server_mod.server_from_config(_config(), host="127.0.0.1", port=0, secret=None,
                                           weights_dir=str(tmp_path / "policy"), with_tokenizer=False)
    try:
        assert list(calls) == ["init"] and len(calls["init"]) == 1
        assert server.engine.policy_version == 0
        expected = init_params(get_model_config("tiny"), jax.random.PRNGKey(0))  # tiny_cpu's seed
        for a, b in zip(jax.tree.leaves(server.engine.params), jax.tree.leaves(expected), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    finally:
        server.shutdown()


def test_server_and_trainer_build_the_same_model_config():
    config = _config()
    config.model.remat, config.model.attention_impl = "full", "xla"
    engine_config = factory.load_policy(config)[0]
    assert engine_config == model_config_from(config)
    assert engine_config.remat == "full"
