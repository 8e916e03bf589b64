"""The trainer's batch for one optimizer update, as shapes: what `launch/compile.py` compiles and `launch/plan.py`
plans. Each function mirrors what the trainers build (`rl.rollouts.build_train_batch`, `rl.minibatch`,
`batching.row_shape`, `sft.sft_rows`), at the longest rows the config allows; nothing is materialised.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from swerl_jax.policy import micro_batches
from swerl_jax.rl import minibatch
from swerl_jax.rl.collector import COMPLETION_BUCKET, PROMPT_BUCKET
from swerl_jax.rl.objectives import GRPOLossConfig


def update_rows(config: Any, mode: str = "rl") -> int:
    """Rows one optimizer update trains on: sft.batch_size, or a step's rl.prompts_per_step x rl.num_samples cut
    into rl.ppo_minibatches (each minibatch is an update of its own, `swerl_jax.rl.minibatch`); raises naming
    rl.ppo_minibatches where it does not divide them."""
    if mode == "sft":
        return int(config.sft.batch_size)
    rows, n = int(config.rl.prompts_per_step) * int(config.rl.num_samples), int(config.rl.ppo_minibatches)
    minibatch.check_minibatches(rows, n, int(config.rl.micro_batch_size))
    return rows // n


def train_batch(config: Any, mode: str) -> tuple[dict[str, jax.ShapeDtypeStruct], int, int]:
    """One optimizer update's batch at the trainer's longest shapes: (batch, prompt_len, completion_len).

    RL rows are `rollouts.build_train_batch`'s (+ sampler / reference log-probs), `update_rows` of them (a
    step's rows over rl.ppo_minibatches: each minibatch is an update of its own, with its loss scale), the
    proximal log-probs where the objective is decoupled, and a row as long as the collector's caps allow
    (`longest_rl_row`). SFT rows are `sft.sft_rows`'s with the prompt at `data.max_prompt_len` and the target
    filling `sft.max_len`.
    """
    f32, i32, b = jnp.float32, jnp.int32, jnp.bool_
    if mode == "sft":
        rows, width = int(config.sft.batch_size), int(config.sft.max_len)
        p = min(int(config.data.max_prompt_len), width - 1)
        c = width - p
        return {"tokens": jax.ShapeDtypeStruct((rows, width), i32),
                "attention_mask": jax.ShapeDtypeStruct((rows, width), b),
                "loss_mask": jax.ShapeDtypeStruct((rows, c), f32)}, p, c
    rows = update_rows(config, mode)
    p, c = longest_rl_row(config)
    batch = {"tokens": jax.ShapeDtypeStruct((rows, p + c), i32),
             "attention_mask": jax.ShapeDtypeStruct((rows, p + c), b),
             "loss_mask": jax.ShapeDtypeStruct((rows, c), f32), "old_logp": jax.ShapeDtypeStruct((rows, c), f32),
             "advantages": jax.ShapeDtypeStruct((rows,), f32), "truncated": jax.ShapeDtypeStruct((rows,), b),
             "sampler_logp": jax.ShapeDtypeStruct((rows, c), f32)}
    if float(config.rl.kl_coef) > 0:
        batch["ref_logp"] = jax.ShapeDtypeStruct((rows, c), f32)
    if GRPOLossConfig.from_config(config).off_policy == "decoupled":
        batch["prox_logp"] = jax.ShapeDtypeStruct((rows, c), f32)
    if int(config.rl.ppo_minibatches) > 1:
        batch[minibatch.SCALE_KEY] = jax.ShapeDtypeStruct((rows,), f32)
    if str(config.rl.task) == "agent":  # token masks: only the model's turns are scored (at most every position)
        batch["score_positions"] = jax.ShapeDtypeStruct((rows, c), i32)
    return batch, p, c


def longest_rl_row(config: Any) -> tuple[int, int]:
    """(prompt_len, completion_len) of the trainer's longest RL row: `batching.row_shape` buckets a step's rows
    up to data.max_prompt_len and the collector's `completion_cap` (an answer: sampler.max_new_tokens, at least
    one bucket). An agent's episode is one row of at most agent.max_context, its task prompt but the first token
    in the completion (`rollouts.joined_for_training`): the prompt is one bucket."""
    if str(config.rl.task) == "agent":
        return min(PROMPT_BUCKET, int(config.data.max_prompt_len)), int(config.agent.max_context)
    return int(config.data.max_prompt_len), max(COMPLETION_BUCKET, int(config.sampler.max_new_tokens))


def train_info(config: Any, mode: str) -> dict[str, int]:
    """The compiled step's workload: rows, prompt_len, loss_len and num_micro_batches (as the trainer splits),
    and for RL the updates one step makes (rl.update_epochs x rl.ppo_minibatches, each this program once)."""
    batch, p, c = train_batch(config, mode)
    rows = batch["tokens"].shape[0]
    key = "sft.micro_batch_size" if mode == "sft" else "rl.micro_batch_size"
    size = int(config.sft.micro_batch_size) if mode == "sft" else int(config.rl.micro_batch_size)
    info = {"rows": rows, "prompt_len": p, "loss_len": c, "num_micro_batches": micro_batches(rows, size, key)}
    if mode != "sft":
        info["updates_per_step"] = int(config.rl.update_epochs) * int(config.rl.ppo_minibatches)
    return info
