"""The policy being trained, as both trainers (SFT and GRPO) set it up from an experiment config.

    policy = Policy.create(config, num_steps=config.rl.num_steps, global_batch=512)
    step = policy.train_step(loss_fn, example_batch, num_micro_batches=4, key=("rl", 128, 64))
    policy.state, metrics = step(policy.state, policy.shard(batch))

It owns the mesh, the logical-axis rules, the model config, the optimizer and the sharded `TrainState`, and
caches one jitted train step per batch shape (the trainers bucket lengths, so a run compiles a handful).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import Mesh

from swerl_jax import sharding
from swerl_jax.model.config import MODEL_CONFIGS, LlamaConfig, get_model_config
from swerl_jax.model.convert import CheckpointError, hf_config_to_llama, load_hf
from swerl_jax.model.hf_stream import read_hf_config
from swerl_jax.model.smollm2 import resolve_hf_dir
from swerl_jax.optim import make_optimizer
from swerl_jax.runs.checkpoint import abstract_like
from swerl_jax.train_step import TrainState, create_train_state, make_train_step

# The fields that make a checkpoint another model than the experiment's (ours -> config.json's key).
_SHAPE_KEYS = {"family": "model_type", "vocab_size": "vocab_size", "hidden_size": "hidden_size",
               "intermediate_size": "intermediate_size", "num_layers": "num_hidden_layers",
               "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads", "head_size": "head_dim",
               "tie_word_embeddings": "tie_word_embeddings"}


def model_config_from(config: Any) -> LlamaConfig:
    """The `model` section as a LlamaConfig: the registry entry (or the HF directory's config) + dtype/remat.

    With `model.hf_dir` the directory's config.json gives the model, and it must be `model.name`'s (family and
    shape): a Qwen3 checkpoint under a Llama experiment, or a 1B under `llama3.1-8b`, is a CheckpointError naming
    the file and the key. `model.name="hf"` takes the model from config.json whatever it is (evaluating a folder).
    """
    m = config.model
    overrides = {"param_dtype": str(m.param_dtype), "dtype": str(m.dtype), "remat": str(m.remat),
                 "attention_impl": m.attention_impl}
    if m.hf_dir:
        path = resolve_hf_dir(m.hf_dir) / "config.json"
        loaded = hf_config_to_llama(read_hf_config(path.parent), str(m.param_dtype), source=str(path))
        named = MODEL_CONFIGS.get(str(m.name))
        if named is not None and named.family != loaded.family:
            same = sorted(n for n, c in MODEL_CONFIGS.items() if c.family == loaded.family)
            raise CheckpointError(
                f"{path}: model_type={loaded.family!r} is a {loaded.family} checkpoint, but model.name={m.name!r} is "
                f"a {named.family} model; set model.name to a {loaded.family} entry ({', '.join(same)}) or "
                f"model.hf_dir to a {named.family} checkpoint")
        if named is not None:
            for ours, key in _SHAPE_KEYS.items():
                if getattr(named, ours) != getattr(loaded, ours):
                    match = [n for n, c in MODEL_CONFIGS.items()
                             if all(getattr(c, f) == getattr(loaded, f) for f in _SHAPE_KEYS)]
                    raise CheckpointError(
                        f"{path}: {key}={getattr(loaded, ours)!r}, but model.name={m.name!r} has "
                        f"{getattr(named, ours)!r}: the checkpoint is another model than the experiment's; set "
                        f"model.name to its entry ({', '.join(match) or 'none registered'}) or model.name='hf' to "
                        "take the model from config.json")
        return loaded.replace(**overrides)
    return get_model_config(str(m.name), **overrides)


def initial_params(config: Any, model_config: LlamaConfig, mesh: Mesh, rules: sharding.Rules) -> Any:
    """Pretrained weights from `model.hf_dir` read straight into their shards (each process reads only the slices
    its devices hold; no host or device holds the model), or a seeded random init in them."""
    if config.model.hf_dir:
        _, params = load_hf(str(resolve_hf_dir(config.model.hf_dir)), param_dtype=str(config.model.param_dtype),
                            shardings=sharding.param_shardings(model_config, mesh, rules))
        return params
    return sharding.init_params_sharded(model_config, mesh, jax.random.key(int(config.seed)), rules)


@dataclasses.dataclass
class Policy:
    """Mesh + model + optimizer + the sharded train state, and the jitted steps that update it."""

    config: Any
    mesh: Mesh
    rules: sharding.Rules
    model_config: LlamaConfig
    optimizer: optax.GradientTransformation
    state: TrainState
    shardings: TrainState
    _steps: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def create(cls, config: Any, num_steps: int, learning_rate: float | None = None, params: Any = None,
               global_batch: int | None = None, warmup_steps: int | None = None) -> Policy:
        """Build the mesh (validated against the model and `global_batch`), the optimizer (`config.optim`,
        `num_steps` for its schedule, `learning_rate` / `warmup_steps` overriding optim.learning_rate /
        optim.warmup_steps) and the state, from `params` when given (e.g. the SFT stage's result), else
        `initial_params`."""
        model_config = model_config_from(config)
        mesh = sharding.create_mesh(config, model_config=model_config, global_batch=global_batch)
        rules = sharding.logical_axis_rules(config)
        optimizer = make_optimizer(config.optim, max(1, int(num_steps)), learning_rate, warmup_steps)
        if params is None:
            params = initial_params(config, model_config, mesh, rules)
        state, shardings = create_train_state(model_config, mesh, optimizer, jax.random.key(int(config.seed)),
                                              rules, params=params)
        return cls(config, mesh, rules, model_config, optimizer, state, shardings)

    def abstract_state(self) -> TrainState:
        """Shapes, dtypes and shardings of the state: the target a checkpoint restores onto."""
        return abstract_like(self.state, self.shardings)

    def shard(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """This process's rows of a batch as global arrays split over the mesh's batch axes."""
        return sharding.shard_batch(batch, self.mesh, self.rules)

    def local_batch_shards(self) -> int:
        """How many batch shards this process's devices hold: a multiple of it is a row count `shard` can split."""
        axes = dict(self.rules).get("activation_batch") or ()
        shards = math.prod(self.mesh.shape[a] for a in ((axes,) if isinstance(axes, str) else axes))
        return max(1, shards // jax.process_count())

    def compiled(self, key: Any) -> bool:
        """Whether a train step is built under `key` already (else its first call compiles)."""
        return key in self._steps

    def train_step(self, loss_fn: Callable, example_batch: dict[str, Any], num_micro_batches: int = 1,
                   key: Any = None, reduction: Callable[[str], str] | None = None
                   ) -> Callable[[TrainState, Any], tuple[TrainState, dict]]:
        """The jitted step for batches shaped like `example_batch` (cached under `key`, e.g. the shape);
        `reduction`: how the loss's metrics combine over micro-batches (`train_step.accumulate_gradients`)."""
        if key not in self._steps:
            self._steps[key] = make_train_step(
                loss_fn, self.optimizer, self.mesh, self.shardings,
                sharding.batch_shardings(self.mesh, example_batch, self.rules), self.rules,
                num_micro_batches=num_micro_batches, weight_key="loss_weight", reduction=reduction)
        return self._steps[key]

    def host_params(self) -> Any:
        """The parameters as host numpy arrays (single-process runs: the inline sampler, tests)."""
        return jax.device_get(self.state.params)


def check_finite(metrics: dict, step: int, stage: str, skip_nonfinite: int) -> bool:
    """Whether the step's loss and gradient norm are finite. A non-finite step raises FloatingPointError
    unless optim.skip_nonfinite > 0 (then optax skipped the update): the run stops before publishing or
    checkpointing the damaged state, and a re-run resumes from the last good checkpoint."""
    finite = bool(np.isfinite(metrics["loss"]) and np.isfinite(metrics["grad_norm"]))
    if not finite and not skip_nonfinite:
        raise FloatingPointError(f"{stage} step {step}: loss {metrics['loss']}, grad_norm {metrics['grad_norm']}; "
                                 "stopping before the state is published or checkpointed (set "
                                 "optim.skip_nonfinite=N to skip up to N such updates in a row instead)")
    return finite


def micro_batches(rows: int, micro_batch_size: int, what: str) -> int:
    """How many micro-batches split `rows` into `micro_batch_size` (0: one); raises naming the config key."""
    if micro_batch_size <= 0 or micro_batch_size >= rows:
        return 1
    if rows % micro_batch_size:
        raise ValueError(f"{what}={micro_batch_size} does not divide the step's {rows} rows")
    return rows // micro_batch_size
