"""A run folder as the trainer leaves it (config.json, checkpoints/<step>/state, policy/v_<step>), written in a
second from a random init: for the entry points that read a run (export, repair_score, eval run) without training."""

from __future__ import annotations

import pathlib

import jax
import orbax.checkpoint as ocp

from swerl_jax.config import load_experiment_config
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.resolve import resolve_config
from swerl_jax.sampler import weights

STEP = 3


def small_run(run: pathlib.Path, model: str = "demo-7m", weights_model: str | None = None) -> pathlib.Path:
    """tiny_cpu's config with `model.name=model` in `run`/config.json, and step STEP's params of `weights_model`
    (default: the same model) as its checkpoint and published policy. Returns `run`."""
    config = load_experiment_config("experiments/tiny_cpu.py")
    config.model.name = model
    run.mkdir(parents=True)
    (run / "config.json").write_text(resolve_config(config).to_json(indent=1))
    params = init_params(get_model_config(weights_model or model), jax.random.PRNGKey(3))
    weights.publish(run / "policy", params, STEP)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save((run / "checkpoints" / str(STEP) / "state").absolute(), {"params": params})
    checkpointer.wait_until_finished()
    checkpointer.close()
    return run
