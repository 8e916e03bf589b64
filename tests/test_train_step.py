"""The sharded train step equals the single-device computation on 8 fake CPU devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from swerl_jax import sharding
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import forward, init_params
from swerl_jax.train_step import TrainState, accumulate_gradients, create_train_state, make_train_step

# 8 query heads / 4 KV heads / 128 MLP / 256 vocab: every sharded dimension divides a tensor axis of 4.
MODEL = get_model_config("tiny", num_heads=8, num_kv_heads=4, hidden_size=64, intermediate_size=128,
                         vocab_size=256)
BATCH, SEQ = 8, 16
TOL = 1e-5  # fp32: sharded reductions only reorder sums


def mesh_config(data: int, fsdp: int, tensor: int) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.mesh = ml_collections.ConfigDict({"name": "cpu8", "shape": {"data": data, "fsdp": fsdp, "tensor": tensor},
                                        "dcn_shape": {"data": 1, "fsdp": 1, "tensor": 1},
                                        "logical_axis_rules": ()})
    return c


def lm_loss(params, batch):
    """Masked next-token cross-entropy (token mean) with an auxiliary metric."""
    logits = forward(MODEL, params, batch["tokens"], batch["mask"])
    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    nll = -jnp.take_along_axis(logp, batch["tokens"][:, 1:, None], axis=-1)[..., 0]
    weights = batch["mask"][:, 1:].astype(jnp.float32)
    loss = jnp.sum(nll * weights) / jnp.sum(weights)
    return loss, {"tokens": jnp.sum(weights)}


def make_batch(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, MODEL.vocab_size, (BATCH, SEQ), dtype=np.int32)
    lengths = rng.integers(SEQ // 2, SEQ + 1, BATCH)
    mask = np.arange(SEQ)[None, :] >= (SEQ - lengths)[:, None]  # left padding, as the RL batches have
    return {"tokens": tokens, "mask": mask}


@pytest.fixture(scope="module")
def reference():
    params = jax.jit(init_params, static_argnums=0)(MODEL, jax.random.key(0))  # jitted: eager init is slow
    batch = make_batch()
    (loss, _), grads = jax.jit(jax.value_and_grad(lm_loss, has_aux=True))(params, batch)
    return jax.device_get(params), batch, float(loss), jax.device_get(grads)


def sharded_step(shape, params, num_micro_batches=1, optimizer=None):
    config = mesh_config(*shape)
    mesh = sharding.create_mesh(config, model_config=MODEL, global_batch=BATCH)
    rules = sharding.logical_axis_rules(config)
    optimizer = optimizer or optax.sgd(1.0)
    state, s_shard = create_train_state(MODEL, mesh, optimizer, jax.random.key(1), rules, params=params)
    batch = make_batch()
    step = make_train_step(lm_loss, optimizer, mesh, s_shard, sharding.batch_shardings(mesh, batch, rules), rules,
                           num_micro_batches=num_micro_batches)
    return step, state, sharding.shard_batch(batch, mesh, rules), mesh


@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 4, 1), (1, 2, 4), (2, 2, 2)])
def test_sharded_step_matches_single_device(reference, shape):
    params, _, ref_loss, ref_grads = reference
    step, state, batch, mesh = sharded_step(shape, params)
    new_state, metrics = step(state, batch)
    assert abs(float(metrics["loss"]) - ref_loss) <= TOL
    # SGD with lr 1: new = old - grad, so the gradients are recovered exactly up to fp32 rounding of params.
    new_params = jax.device_get(new_state.params)
    grads = jax.tree.map(lambda old, new: old - new, params, new_params)
    errs = jax.tree.map(lambda g, r: float(np.max(np.abs(g - r))), grads, ref_grads)
    assert max(jax.tree.leaves(errs)) <= TOL, errs
    # The parameters stay sharded as planned (FSDP on embed, tensor on heads).
    q = new_state.params["layers"]["self_attn"]["q_proj"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)
    assert int(new_state.step) == 1
    assert float(metrics["tokens"]) == float(np.sum(make_batch()["mask"][:, 1:]))


def test_micro_batches_average_gradients(reference):
    """4 micro-batches of 2 rows == the mean of 4 separate value_and_grad calls (hand-rolled reference)."""
    params, batch, _, _ = reference
    micro_losses, micro_grads = [], []
    grad_fn = jax.jit(jax.value_and_grad(lm_loss, has_aux=True))  # one compile for the 4 equal-shape calls
    for i in range(4):
        mb = {k: v[i::4] for k, v in batch.items()}
        (loss, _), grads = grad_fn(params, mb)
        micro_losses.append(float(loss))
        micro_grads.append(grads)
    want = jax.tree.map(lambda *g: np.mean(np.stack(g), axis=0), *micro_grads)
    loss, _, grads = jax.jit(lambda p, b: accumulate_gradients(lm_loss, p, b, 4))(params, batch)
    assert abs(float(loss) - np.mean(micro_losses)) <= TOL
    errs = jax.tree.map(lambda g, r: float(np.max(np.abs(np.asarray(g) - r))), grads, want)
    assert max(jax.tree.leaves(errs)) <= TOL
    # And sharded over 2x2x2 with micro-batching, through the full step.
    step, state, sbatch, _ = sharded_step((2, 2, 2), params, num_micro_batches=2)
    _, metrics = step(state, sbatch)
    loss_fn = jax.jit(lm_loss)
    halves = [loss_fn(params, {k: v[i::2] for k, v in batch.items()})[0] for i in range(2)]
    assert abs(float(metrics["loss"]) - float(np.mean(halves))) <= TOL


def test_adam_steps_match_and_buffers_are_donated(reference):
    params, batch, _, _ = reference
    opt = optax.adamw(1e-2)
    ref_state = TrainState(jnp.zeros((), jnp.int32), params, opt.init(params))
    ref_losses = []

    @jax.jit
    def ref_step(state):  # plain single-device Adam step
        (loss, _), grads = jax.value_and_grad(lm_loss, has_aux=True)(state.params, batch)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        return TrainState(state.step + 1, optax.apply_updates(state.params, updates), opt_state), loss

    for _ in range(3):
        ref_state, loss = ref_step(ref_state)
        ref_losses.append(float(loss))
    step, state, sbatch, _ = sharded_step((2, 2, 2), params, optimizer=opt)
    losses = []
    for _ in range(3):
        old = state
        state, metrics = step(state, sbatch)
        losses.append(float(metrics["loss"]))
    assert old.params["embed_tokens"].is_deleted()  # donated: updated in place
    np.testing.assert_allclose(losses, ref_losses, atol=TOL)
    mu = state.opt_state[0].mu["layers"]["mlp"]["gate_proj"]
    assert mu.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor")


def test_token_weighted_micro_batches_equal_the_full_batch(reference):
    """Micro-batches with different token counts: weighting by aux["tokens"] recovers the full-batch token mean."""
    params, batch, ref_loss, ref_grads = reference
    fn = jax.jit(lambda p, b: accumulate_gradients(lm_loss, p, b, 4, weight_key="tokens"))
    loss, aux, grads = fn(params, batch)
    assert abs(float(loss) - ref_loss) <= TOL
    assert float(aux["tokens"]) == float(np.sum(batch["mask"][:, 1:]))
    errs = jax.tree.map(lambda g, r: float(np.max(np.abs(np.asarray(g) - r))), grads, ref_grads)
    assert max(jax.tree.leaves(errs)) <= TOL
    # The unweighted mean differs here (the micro-batches hold different numbers of tokens).
    plain, _, _ = jax.jit(lambda p, b: accumulate_gradients(lm_loss, p, b, 4))(params, batch)
    assert abs(float(plain) - ref_loss) > 1e-4
    with pytest.raises(KeyError, match="weight_key='count' is not among"):
        accumulate_gradients(lm_loss, params, batch, 4, weight_key="count")

