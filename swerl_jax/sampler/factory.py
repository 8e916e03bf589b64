"""The sampling engine for an experiment config: which weights (a published policy version, `model.hf_dir`, or a
seeded init), the trainer's model config, the sampler's limits. Every user of an in-process engine (the inline
sampler of the trainers, the sampler server, evaluation, test-time scaling) builds it here."""

from __future__ import annotations

import jax

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.convert import load_hf
from swerl_jax.model.llama import init_params
from swerl_jax.model.smollm2 import resolve_hf_dir
from swerl_jax.policy import model_config_from
from swerl_jax.sampler.continuous import ContinuousEngine
from swerl_jax.sampler.engine import SamplingEngine
from swerl_jax.sampler.weights import latest_version, load
from swerl_jax.sections import Experiment
from swerl_jax.tokenizer import tokenizer_for


def load_policy(config: Experiment, weights_dir: str = "") -> tuple[LlamaConfig, dict, int | None]:
    """(model config, params, published version or None) for an experiment config, reading weights once.

    The newest version published in `weights_dir` when there is one (only its shapes come from the model config,
    `jax.eval_shape`: a 70B `model.hf_dir` is not loaded just to be replaced), else `model.hf_dir`'s weights,
    else a seeded random init; the model config is the trainer's (`policy.model_config_from`).
    """
    model_config = model_config_from(config)
    if weights_dir and (version := latest_version(weights_dir)) is not None:
        device = jax.devices()[0]
        shapes = jax.eval_shape(lambda: init_params(model_config, jax.random.PRNGKey(0)))
        like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                           sharding=jax.sharding.SingleDeviceSharding(device)),
                            shapes)
        return model_config, load(weights_dir, version, like=like), version
    m = config.model
    if m.hf_dir:
        _, params = load_hf(str(resolve_hf_dir(m.hf_dir)), param_dtype=m.param_dtype)
        return model_config, params, None
    return model_config, init_params(model_config, jax.random.PRNGKey(config.seed)), None


def load_engine(config: Experiment, with_tokenizer: bool = True, weights_dir: str = ""
                ) -> tuple[SamplingEngine, int | None]:
    """(engine, the published version it holds or None) for an experiment config (model, sampler.* limits,
    data.max_prompt_len), on the newest policy version in `weights_dir` when there is one (see `load_policy`)."""
    model_config, params, version = load_policy(config, weights_dir)
    tokenizer = tokenizer_for(config.model) if with_tokenizer else None
    s = config.sampler
    limits = dict(tokenizer=tokenizer, max_batch=s.max_batch, max_prompt_len=config.data.max_prompt_len,
                  max_new_tokens=s.max_new_tokens, policy_version=version or 0)
    if s.partial_rollouts:  # the server hands it its weight watcher (`SamplerServer`)
        if s.partial_segment < 1:
            raise ValueError(f"sampler.partial_segment must be >= 1, got {s.partial_segment}")
        return ContinuousEngine(model_config, params, segment=s.partial_segment, partial_rollouts=True,
                                **limits), version
    return SamplingEngine(model_config, params, **limits), version


def build_engine(config: Experiment, with_tokenizer: bool = True) -> SamplingEngine:
    """The engine for an experiment config on `model.hf_dir`'s weights or a seeded init (the inline sampler)."""
    return load_engine(config, with_tokenizer)[0]
