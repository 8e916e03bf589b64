"""A generic sharded training step: loss -> gradients (micro-batched) -> optax update, jitted over a mesh.

The GRPO and SFT trainers supply their own `loss_fn(params, batch) -> (loss, aux)`; this module owns the
parallelism: explicit input/output shardings (parameters and optimizer state stay sharded as
`swerl_jax.sharding` laid them out, the batch is split over the data axes), the state buffers donated so the
update happens in place, and gradient accumulation over micro-batches in fp32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding

from swerl_jax.sharding import (
    DEFAULT_RULES,
    Rules,
    batch_spec,
    init_params_sharded,
    mesh_context,
    param_shardings,
    replicated,
)

LossFn = Callable[[Any, Any], tuple[jax.Array, dict[str, jax.Array]]]  # aux: a flat dict of metrics


class TrainState(NamedTuple):
    """Everything the step updates: the step counter, parameters and optimizer state."""

    step: jax.Array
    params: Any
    opt_state: Any


def state_shardings(optimizer: optax.GradientTransformation, params_shardings: Any, abstract_params: Any,
                    mesh: Mesh) -> TrainState:
    """Shardings of a TrainState: optimizer moments follow their parameter's sharding, the rest is replicated.

    `abstract_params` is the unboxed params tree (arrays or ShapeDtypeStructs): only shapes are used.
    """
    opt_abstract = jax.eval_shape(optimizer.init, abstract_params)
    opt = optax.tree_map_params(optimizer, lambda _, sharding: sharding, opt_abstract, params_shardings,
                                transform_non_params=lambda _: replicated(mesh),
                                is_leaf=lambda x: isinstance(x, NamedSharding))
    return TrainState(step=replicated(mesh), params=params_shardings, opt_state=opt)


def init_train_state(params: Any, optimizer: optax.GradientTransformation, shardings: TrainState) -> TrainState:
    """A TrainState at step 0 whose optimizer state is created directly in its shards."""
    def init(p: Any) -> TrainState:
        return TrainState(jnp.zeros((), jnp.int32), p, optimizer.init(p))

    return jax.jit(init, in_shardings=(shardings.params,), out_shardings=shardings)(params)


def create_train_state(model_config: Any, mesh: Mesh, optimizer: optax.GradientTransformation, rng: jax.Array,
                       rules: Rules = DEFAULT_RULES, params: Any | None = None) -> tuple[TrainState, TrainState]:
    """(state, its shardings) for a model on `mesh`: random params initialised in their shards, or `params`
    (e.g. loaded from a checkpoint, host or device arrays) placed onto them."""
    p_shard = param_shardings(model_config, mesh, rules)
    if params is None:
        params = init_params_sharded(model_config, mesh, rng, rules)
    else:
        params = jax.device_put(params, p_shard)
    shardings = state_shardings(optimizer, p_shard, params, mesh)
    return init_train_state(params, optimizer, shardings), shardings


def _split_micro(batch: Any, num_micro: int) -> Any:
    """[B, ...] -> [num_micro, B / num_micro, ...] taking rows i, i + M, i + 2M, ... for micro-batch i.

    Strided selection keeps every micro-batch spread evenly over the batch-sharded devices, so splitting
    needs no communication (a contiguous split would put micro-batch 0 on the first devices only).
    """
    def one(x: jax.Array) -> jax.Array:
        if x.shape[0] % num_micro:
            raise ValueError(f"batch of {x.shape[0]} rows does not split into {num_micro} micro-batches")
        x = x.reshape(x.shape[0] // num_micro, num_micro, *x.shape[1:])
        return jnp.moveaxis(x, 1, 0)

    return jax.tree.map(one, batch)


def default_reduction(name: str, weight_key: str | None) -> str:
    """How micro-batches' values of the aux metric `name` combine into the batch's value: counts (`num_*`, the
    weight itself) add up, maxima (`*_max`, `*_max_*`) take the largest, and the rest are means weighted by
    `weight_key` (plain means without one). See `accumulate_gradients`."""
    if name == weight_key or name.startswith("num_"):
        return "sum"
    if name.endswith("_max") or "_max_" in name:
        return "max"
    return weight_key or "mean"


def accumulate_gradients(loss_fn: LossFn, params: Any, batch: Any, num_micro_batches: int = 1,
                         rules: Rules | None = None, weight_key: str | None = None,
                         reduction: Callable[[str], str] | None = None
                         ) -> tuple[jax.Array, dict[str, jax.Array], Any]:
    """(loss, aux, grads) of `loss_fn` over `num_micro_batches` micro-batches.

    With one micro-batch this is plain `value_and_grad`. Otherwise gradients accumulate in fp32 inside a
    `lax.scan` (only one micro-batch's activations live at a time). Without `weight_key` loss and grads are the
    plain mean over micro-batches (exact for per-sequence means over equal micro-batches). With it,
    `aux[weight_key]` is each micro-batch's weight (e.g. its token count) and loss and grads are weight-averaged,
    which makes a token-mean loss exact however tokens fall into micro-batches.

    Each aux metric combines as `reduction(name)` says (default `default_reduction`): "sum", "max", "mean"
    (uniform), or the name of another aux entry to weight by (a token-mean metric by the token count, whatever
    weights the loss), so a logged figure is the whole batch's, not an artefact of how it was split: a maximum
    stays a maximum and a count a total.
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if num_micro_batches == 1:
        (loss, aux), grads = grad_fn(params, batch)
        return loss, aux, grads
    micro = _split_micro(batch, num_micro_batches)
    f32 = jnp.float32
    first = jax.tree.map(lambda x: x[0], micro)
    aux_shape = jax.eval_shape(lambda p, b: loss_fn(p, b)[1], params, first)
    if weight_key is not None and weight_key not in aux_shape:
        raise KeyError(f"weight_key={weight_key!r} is not among the loss_fn's aux outputs {sorted(aux_shape)}")
    how = {k: (reduction or (lambda name: default_reduction(name, weight_key)))(k) for k in aux_shape}
    for k, h in how.items():
        if h not in ("sum", "max", "mean") and h not in aux_shape:
            raise KeyError(f"aux metric {k!r} is weighted by {h!r}, which is not among {sorted(aux_shape)}")

    def body(carry: Any, mb: Any) -> tuple[Any, None]:
        if rules is not None:  # keep each micro-batch split over the data axes
            mb = jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, batch_spec(rules, x.ndim)), mb)
        (loss, aux), grads = grad_fn(params, mb)
        aux = {k: jax.lax.stop_gradient(v).astype(f32) for k, v in aux.items()}
        w = aux[weight_key] if weight_key else jnp.ones((), f32)
        acc_loss, acc_aux, acc_den, acc_grads, acc_w = carry
        acc_grads = jax.tree.map(lambda a, g: a + w * g.astype(f32), acc_grads, grads)
        weights = {k: jnp.ones((), f32) if how[k] == "mean" else aux[how[k]] for k in aux if how[k] not in
                   ("sum", "max")}
        acc_aux = {k: jnp.maximum(acc_aux[k], v) if how[k] == "max" else
                   acc_aux[k] + (v if how[k] == "sum" else weights[k] * v) for k, v in aux.items()}
        acc_den = {k: acc_den[k] + weights[k] for k in acc_den}
        return (acc_loss + w * loss.astype(f32), acc_aux, acc_den, acc_grads, acc_w + w), None

    zeros = (jnp.zeros((), f32),
             {k: jnp.full(v.shape, -jnp.inf if how[k] == "max" else 0.0, f32) for k, v in aux_shape.items()},
             {k: jnp.zeros((), f32) for k in aux_shape if how[k] not in ("sum", "max")},
             jax.tree.map(lambda p: jnp.zeros(p.shape, f32), params), jnp.zeros((), f32))
    (loss, aux, den, grads, total_w), _ = jax.lax.scan(body, zeros, micro)
    tiny = jnp.finfo(f32).tiny
    scale = 1.0 / jnp.maximum(total_w, tiny)  # all-zero weights (fully masked): zero update
    grads = jax.tree.map(lambda g, p: (g * scale).astype(p.dtype), grads, params)
    aux = {k: v / jnp.maximum(den[k], tiny) if k in den else v for k, v in aux.items()}
    return loss * scale, aux, grads


def make_train_step(loss_fn: LossFn, optimizer: optax.GradientTransformation, mesh: Mesh, shardings: TrainState,
                    batch_shardings: Any, rules: Rules = DEFAULT_RULES, num_micro_batches: int = 1,
                    donate: bool = True, weight_key: str | None = None,
                    reduction: Callable[[str], str] | None = None
                    ) -> Callable[[TrainState, Any], tuple[TrainState, dict[str, jax.Array]]]:
    """A jitted `step(state, batch) -> (new_state, metrics)` with explicit shardings.

    Args:
      loss_fn: `(params, batch) -> (scalar loss, dict of scalar metrics)`; traced inside the mesh context so
        the model's logical sharding constraints apply.
      optimizer: any optax transformation (clipping, schedules included).
      mesh, shardings: from `swerl_jax.sharding.create_mesh` and `state_shardings`.
      batch_shardings: a NamedSharding per batch leaf (`swerl_jax.sharding.batch_shardings`).
      num_micro_batches: gradient accumulation; the per-device batch must divide evenly.
      weight_key: aux entry weighting micro-batches (see `accumulate_gradients`), e.g. the token count.
      reduction: how each aux metric combines over micro-batches (`accumulate_gradients`; None: the default).
      donate: donate the input state's buffers (the caller must not reuse `state` after the call).

    Metrics (replicated scalars): loss, grad_norm (before the optimizer's clipping), param_norm, and aux.
    """
    metrics_sharding = replicated(mesh)

    def step(state: TrainState, batch: Any) -> tuple[TrainState, dict[str, jax.Array]]:
        loss, aux, grads = accumulate_gradients(loss_fn, state.params, batch, num_micro_batches, rules, weight_key,
                                                 reduction)
        # Gradients share their parameter's layout (reduce-scatter rather than all-reduce under FSDP).
        grads = jax.lax.with_sharding_constraint(grads, shardings.params)
        with jax.named_scope("optimizer"):  # names the update in a profile (benchmarks/profile_split.py)
            updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
            params = optax.apply_updates(state.params, updates)
        metrics = {"loss": loss, "grad_norm": optax.global_norm(grads), "param_norm": optax.global_norm(params),
                   **aux}
        return TrainState(state.step + 1, params, opt_state), metrics

    jitted = jax.jit(step, in_shardings=(shardings, batch_shardings),
                     out_shardings=(shardings, metrics_sharding), donate_argnums=(0,) if donate else ())

    def run(state: TrainState, batch: Any) -> tuple[TrainState, dict[str, jax.Array]]:
        with mesh_context(mesh, rules):
            return jitted(state, batch)

    run.jitted = jitted  # for .lower(...).compile().memory_analysis() / cost_analysis()
    run.lower = lambda state, batch: _lower(jitted, mesh, rules, state, batch)
    return run


def _lower(jitted: Any, mesh: Mesh, rules: Rules, state: Any, batch: Any) -> Any:
    with mesh_context(mesh, rules):
        return jitted.lower(state, batch)
