"""The SFT baseline: next-token loss on the oracle answer (a short thought + SEARCH/REPLACE edits), prompt masked.

    params = SFTTrainer(config, workdir / "sft").run()   # resumes from its own checkpoints

The paper's SFT baseline (36.2% vs RL's 41.0% on SWE-bench Verified) and the CPU demo's warm start both use it.
Batches come from the Grain SFT loader (unpadded prompt and target + end-of-turn ids, at most sft.max_len
together) and are laid out by `swerl_jax.batching` exactly like GRPO rows: the prompt left-padded to a bucketed
length P, the target right-padded to a bucketed C, so the vocabulary projection runs on the C target positions
only (`token_logprobs(start=P-1)`), not on the whole padded sequence. Metrics go to `workdir/metrics.jsonl` and
TensorBoard, checkpoints to `workdir/checkpoints` (the loop both trainers share: `swerl_jax.runs.loop`).
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax import sharding
from swerl_jax.batching import pack_rows, pack_segments, row_shape, score_positions
from swerl_jax.data.loader import data_metrics, sft_dataset_from_config
from swerl_jax.model.llama import token_logprobs
from swerl_jax.policy import Policy, check_finite, micro_batches
from swerl_jax.resolve import ensure_resolved
from swerl_jax.runs.checkpoint import Checkpointer
from swerl_jax.runs.loop import TrainLoop

PROMPT_BUCKET, TARGET_BUCKET = 64, 48


def sft_rows(batch: dict, max_len: int, prompt_bucket: int = PROMPT_BUCKET, target_bucket: int = TARGET_BUCKET
             ) -> tuple[dict[str, np.ndarray], int, int]:
    """Loader SFT batch (unpadded prompt and target ids) -> (rows, P, C) in `swerl_jax.batching`'s layout: the
    prompt left-padded to a bucketed P, the target right-padded to a bucketed C (both capped by `max_len`).

    Returns tokens/attention_mask [B, P + C] and loss_mask [B, C] (1 on target tokens, the end of turn included;
    with a `target_mask` per row, e.g. an agent episode's observations at 0, only where it is 1, and
    `score_positions` [B, K]: the only positions projected onto the vocabulary).
    """
    prompts, targets = batch["prompt_ids"], batch["target_ids"]
    p, c = row_shape(prompts, targets, prompt_bucket=prompt_bucket, completion_bucket=target_bucket,
                     prompt_cap=max(prompt_bucket, max_len), completion_cap=max(target_bucket, max_len))
    rows = pack_rows(prompts, targets, p, c)
    if batch.get("target_mask") is not None:
        for i, mask in enumerate(batch["target_mask"]):
            rows["loss_mask"][i, :len(mask)] *= mask
        rows["score_positions"] = score_positions(rows["loss_mask"])
    return rows, p, c


def check_token_ids(tokens: np.ndarray, vocab_size: int, model: Any) -> None:
    """Raise ValueError naming model.name and model.tokenizer when a token id is past the model's vocabulary: the
    embedding lookup would clamp it to the last row and train on a wrong token without a word."""
    top = int(tokens.max(initial=0))
    if top >= vocab_size:
        raise ValueError(f"token id {top} is outside model.name={model.name!r}'s vocabulary of {vocab_size}: "
                         f"model.tokenizer={model.tokenizer or 'smollm2'!r} writes ids the model has no row for; "
                         "pick a model whose vocab_size covers the tokenizer (e.g. testbed-* with 'testbed', "
                         "demo-7m or smollm2-135m with SmolLM2's)")


def make_sft_loss(model_config: Any, prompt_len: int, target_len: int):
    """Token-mean negative log-likelihood of the target tokens (`loss_weight` = their count, for micro-batches)."""
    def loss_fn(params: Any, batch: dict) -> tuple[jax.Array, dict]:
        logp = token_logprobs(model_config, params, batch["tokens"], batch["attention_mask"], start=prompt_len - 1,
                              length=target_len, positions=batch.get("score_positions"))
        mask = batch["loss_mask"]
        n = mask.sum()
        nll = -(logp * mask).sum() / jnp.maximum(n, 1.0)
        correct = (logp > jnp.log(0.5)) * mask  # the target token had > 50% probability (greedy would pick it)
        return nll, {"nll": nll, "token_acc_p50": correct.sum() / jnp.maximum(n, 1.0), "num_tokens": n,
                     "loss_weight": n}

    return loss_fn


def make_packed_sft_loss(model_config: Any):
    """`make_sft_loss` over packed rows (`batching.pack_segments`): the same weighted token-mean, each example
    attending only to itself; `loss_mask` [R, W] weighs the column that predicts each target token."""
    def loss_fn(params: Any, batch: dict) -> tuple[jax.Array, dict]:
        logp = token_logprobs(model_config, params, batch["tokens"], batch["attention_mask"],
                              positions=batch["score_positions"], segment_ids=batch["segment_ids"],
                              rope_positions=batch["positions"])
        mask = batch["loss_mask"]
        n = mask.sum()
        nll = -(logp * mask).sum() / jnp.maximum(n, 1.0)
        correct = (logp > jnp.log(0.5)) * mask
        return nll, {"nll": nll, "token_acc_p50": correct.sum() / jnp.maximum(n, 1.0), "num_tokens": n,
                     "loss_weight": n}

    return loss_fn


def packed_rows(batch: dict, row_multiple: int = 1) -> dict[str, np.ndarray]:
    """Loader SFT batch -> packed rows (`batching.pack_segments`), the prompt-loss weights as target weights."""
    return pack_segments(batch["prompt_ids"], batch["target_ids"], batch.get("target_mask"),
                         row_multiple=row_multiple)


class SFTTrainer(TrainLoop):
    """Supervised fine-tuning on the records' oracle answers, with the GRPO trainer's sharding and checkpoints."""

    stage = "sft"

    def __init__(self, config: Any, workdir: str | pathlib.Path, initial_params: Any = None) -> None:
        self.config = config = ensure_resolved(config)  # typed sections (resolved by the entry point)
        self.workdir = pathlib.Path(workdir)
        s = config.sft
        self.num_steps = int(s.num_steps)
        self.max_len = int(s.max_len)
        self.num_micro = micro_batches(int(s.batch_size), int(s.micro_batch_size), "sft.micro_batch_size")
        self.policy = Policy.create(config, self.num_steps, learning_rate=float(s.learning_rate),
                                    params=initial_params, global_batch=int(s.batch_size))
        self.data_iter = self.make_data_iter()
        self.checkpointer = Checkpointer.from_config(config, self.workdir)
        self.is_main = sharding.is_main_process()
        self.pack = bool(s.pack)

    def make_data_iter(self) -> Any:
        """The Grain iterator of SFT batches (checkpointed with each step); the agent's stage overrides it."""
        return iter(sft_dataset_from_config(self.config))

    def train_step(self, step: int) -> tuple[dict, list]:
        """One SFT update on the loader's next batch; returns (metrics, no rollouts)."""
        t0 = time.perf_counter()
        raw = next(self.data_iter)
        t_data = time.perf_counter() - t0
        if self.pack:
            batch = packed_rows(raw, self.policy.local_batch_shards())
            loss_fn, key = make_packed_sft_loss(self.policy.model_config), ("sft_packed",) + batch["tokens"].shape
            key += batch["score_positions"].shape[1:]
        else:
            batch, p, c = sft_rows(raw, self.max_len)
            loss_fn, key = make_sft_loss(self.policy.model_config, p, c), ("sft", p, c)
        check_token_ids(batch["tokens"], self.policy.model_config.vocab_size, self.config.model)
        step_fn = self.policy.train_step(loss_fn, batch, self.num_micro, key=key)
        self.policy.state, m = step_fn(self.policy.state, self.policy.shard(batch))
        metrics = {k: float(v) for k, v in jax.device_get(m).items()}
        check_finite(metrics, step, "SFT", int(self.config.optim.skip_nonfinite))
        metrics["time"] = {"data_s": t_data, "step_s": time.perf_counter() - t0}
        metrics.update(data_metrics(self.data_iter))
        return metrics, []

    def run(self) -> Any:
        """Train to sft.num_steps (resuming from the latest checkpoint); returns the final params (sharded)."""
        self.run_loop()
        return self.policy.state.params
