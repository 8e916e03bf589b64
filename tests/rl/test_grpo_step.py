"""The trainer's loss (`rl.trainer.make_rl_loss`: grpo_loss + the sampler/trainer log-prob mismatch) on a tiny Llama
in the sharded, micro-batched train step with make_optimizer, then Checkpointer save -> restore -> the next step
is bit-identical."""

import jax
import jax.numpy as jnp
import numpy as np

from experiments.base import get_config
from swerl_jax import sharding
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.optim import make_optimizer
from swerl_jax.rl import minibatch
from swerl_jax.rl.trainer import make_rl_loss
from swerl_jax.runs.checkpoint import Checkpointer, abstract_like
from swerl_jax.train_step import create_train_state, make_train_step
from tests.rl.loss_configs import loss_config

MODEL = get_model_config("tiny", num_heads=4, num_kv_heads=2, hidden_size=32, intermediate_size=64,
                         vocab_size=128, num_layers=2)
B, PROMPT, COMP = 8, 6, 6
CFG = loss_config(clip_eps_low=0.2, clip_eps_high=0.28, kl_coef=0.05, kl_estimator="k3",
              loss_agg="seq-mean-token-mean", entropy_coef=0.01, compact_filtering=True)
TEMPERATURE = 0.7  # the trainer scores log-probs at the sampler's temperature
loss_fn = make_rl_loss(MODEL, CFG, PROMPT, COMP, TEMPERATURE)


def make_batch():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, MODEL.vocab_size, (B, PROMPT + COMP), dtype=np.int32)
    plen = rng.integers(2, PROMPT + 1, B)
    clen = rng.integers(1, COMP + 1, B)
    col = np.arange(PROMPT + COMP)
    attn = (col >= PROMPT - plen[:, None]) & (col < PROMPT + clen[:, None])
    loss_mask = (np.arange(COMP) < clen[:, None]).astype(np.float32)
    # a freshly initialised policy is near uniform (logp ~ -log V): behaviour log-probs around that value put
    # the ratios within ~e^(+-0.3) of 1, so some tokens clip and some do not
    around = lambda sd: (-np.log(MODEL.vocab_size) + rng.normal(0, sd, (B, COMP))).astype(np.float32)
    old = around(0.3)
    return {"tokens": tokens, "attention_mask": attn, "loss_mask": loss_mask, "old_logp": old,
            "sampler_logp": old + rng.normal(0, 0.01, (B, COMP)).astype(np.float32), "ref_logp": around(0.1),
            "advantages": rng.normal(size=B).astype(np.float32), "truncated": clen == COMP}


def test_sharded_micro_batched_grpo_step_and_checkpoint_resume(tmp_path):
    config = get_config()
    config.mesh.name = "cpu8"
    config.mesh.shape = {"data": 2, "fsdp": 4, "tensor": 1}
    config.optim.update(learning_rate=1e-2, warmup_steps=1, schedule="cosine", grad_accum_steps=2, grad_clip=0.5)
    mesh = sharding.create_mesh(config, model_config=MODEL, global_batch=B)
    rules = sharding.logical_axis_rules(config)
    params = jax.device_get(jax.jit(init_params, static_argnums=0)(MODEL, jax.random.key(0)))
    batch = make_batch()

    # reference: the whole batch at once, no sharding, no micro-batches
    ref_loss, ref_aux = jax.jit(loss_fn)(params, batch)
    assert 0 < float(ref_aux["clip_frac"]) < 1 and float(ref_aux["filtered_frac"]) > 0
    assert float(ref_aux["kl"]) > 0 and float(ref_aux["logprob_max_abs_diff"]) > 0  # reference and mismatch used

    optimizer = make_optimizer(config.optim, num_steps=4)
    state, shardings = create_train_state(MODEL, mesh, optimizer, jax.random.key(1), rules, params=params)
    step = make_train_step(loss_fn, optimizer, mesh, shardings, sharding.batch_shardings(mesh, batch, rules), rules,
                           num_micro_batches=2, weight_key="loss_weight", donate=False,
                           reduction=minibatch.metric_reduction)
    sbatch = sharding.shard_batch(batch, mesh, rules)
    state, metrics = step(state, sbatch)
    # micro-batches weighted by their active-sequence count reproduce the whole-batch seq-mean loss (fp32 sums)
    np.testing.assert_allclose(float(metrics["loss"]), float(ref_loss), rtol=1e-5, atol=1e-6)
    assert float(metrics["loss_weight"]) == float(ref_aux["loss_weight"])
    # and so is every metric: token means (kl, entropy, clip and ratio figures), maxima, counts, row fractions;
    # weighted as the loss (by sequences), kl and entropy moved with rl.micro_batch_size, maxima were averaged
    for key, value in ref_aux.items():
        np.testing.assert_allclose(float(metrics[key]), float(value), rtol=1e-5, atol=1e-6, err_msg=key)

    with Checkpointer(tmp_path, every_steps=1) as ck:
        ck.save(1, state, rng=jax.random.key(5), host_state={"metrics_step": 1})
    with Checkpointer(tmp_path, every_steps=1) as ck:
        restored = ck.restore_latest(abstract_like(state, shardings))
    q = restored.state.params["layers"]["self_attn"]["q_proj"]
    assert q.sharding == shardings.params["layers"]["self_attn"]["q_proj"]

    # two more steps from the live state and from the restored one: identical (same program, same inputs)
    live, restored_state = state, restored.state
    for _ in range(2):
        live, m_live = step(live, sbatch)
        restored_state, m_restored = step(restored_state, sbatch)
        assert {k: float(v) for k, v in m_live.items()} == {k: float(v) for k, v in m_restored.items()}
    for a, b in zip(jax.tree.leaves(live), jax.tree.leaves(restored_state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(live.step) == 3 and float(jnp.abs(live.params["norm"]["scale"] - 1).max()) > 0  # it trained
