"""The SFT baseline: next-token loss on the oracle answer (a short thought + SEARCH/REPLACE edits), prompt masked.

    params = SFTTrainer(config, workdir / "sft").run()   # resumes from its own checkpoints

The paper's SFT baseline (36.2% vs RL's 41.0% on SWE-bench Verified) and the CPU demo's warm start both use it.
Batches come from the Grain SFT loader (prompt + target + end of turn, right-padded to sft.max_len) and are
re-laid out like GRPO rows: the prompt left-padded to a bucketed length P, the target right-padded to a
bucketed C, so the vocabulary projection runs on the C target positions only (`token_logprobs(start=P-1)`),
not on the whole padded sequence. Metrics go to `workdir/metrics.jsonl` and TensorBoard, checkpoints to
`workdir/checkpoints` (same `Checkpointer` and `MetricsWriter` as GRPO).
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax import sharding
from swerl_jax.checkpoint import Checkpointer
from swerl_jax.config import resolve_config
from swerl_jax.data.loader import data_metrics, sft_dataset_from_config
from swerl_jax.loop import TrainLoop
from swerl_jax.model.llama import token_logprobs
from swerl_jax.policy import Policy, check_finite, global_max, micro_batches
from swerl_jax.rl.rollouts import bucket_length

PROMPT_BUCKET, TARGET_BUCKET = 64, 48


def relayout(batch: dict[str, np.ndarray], prompt_bucket: int = PROMPT_BUCKET, target_bucket: int = TARGET_BUCKET
             ) -> tuple[dict[str, np.ndarray], int, int]:
    """Loader SFT rows (right-padded prompt + target) -> ([left-padded prompt | right-padded target], P, C).

    Returns tokens/attention_mask [B, P + C] and loss_mask [B, C] (1 on target tokens, the end of turn included).
    """
    tokens, mask, loss = batch["tokens"], batch["mask"].astype(bool), batch["loss_mask"].astype(bool)
    plen = batch["prompt_len"].astype(np.int64)
    tlen = loss.sum(axis=1)
    # one shape on every process: the longest prompt / target anywhere
    p = bucket_length(global_max(int(plen.max())), prompt_bucket, max(prompt_bucket, tokens.shape[1]))
    c = bucket_length(global_max(max(1, int(tlen.max()))), target_bucket, max(target_bucket, tokens.shape[1]))
    b = tokens.shape[0]
    out = np.zeros((b, p + c), np.int32)
    attn = np.zeros((b, p + c), bool)
    loss_mask = np.zeros((b, c), np.float32)
    for i in range(b):
        n, t = int(plen[i]), int(tlen[i])
        out[i, p - n:p] = tokens[i, :n]
        out[i, p:p + t] = tokens[i, n:n + t]
        attn[i, p - n:p + t] = True
        loss_mask[i, :t] = 1.0
        if not mask[i, :n + t].all():
            raise ValueError(f"SFT row {i}: prompt + target tokens are not contiguous from the start")
    return {"tokens": out, "attention_mask": attn, "loss_mask": loss_mask}, p, c


def make_sft_loss(model_config: Any, prompt_len: int, target_len: int):
    """Token-mean negative log-likelihood of the target tokens (`loss_weight` = their count, for micro-batches)."""
    def loss_fn(params: Any, batch: dict) -> tuple[jax.Array, dict]:
        logp = token_logprobs(model_config, params, batch["tokens"], batch["attention_mask"], start=prompt_len - 1,
                              length=target_len)
        mask = batch["loss_mask"]
        n = mask.sum()
        nll = -(logp * mask).sum() / jnp.maximum(n, 1.0)
        correct = (logp > jnp.log(0.5)) * mask  # the target token had > 50% probability (greedy would pick it)
        return nll, {"nll": nll, "token_acc_p50": correct.sum() / jnp.maximum(n, 1.0), "num_tokens": n,
                     "loss_weight": n}

    return loss_fn


class SFTTrainer(TrainLoop):
    """Supervised fine-tuning on the records' oracle answers, with the GRPO trainer's sharding and checkpoints."""

    stage = "sft"

    def __init__(self, config: Any, workdir: str | pathlib.Path, initial_params: Any = None) -> None:
        self.config = config = resolve_config(config)  # typed sections, every key checked (swerl_jax.config)
        self.workdir = pathlib.Path(workdir)
        s = config.sft
        self.num_steps = int(s.num_steps)
        self.num_micro = micro_batches(int(s.batch_size), int(s.micro_batch_size), "sft.micro_batch_size")
        self.policy = Policy.create(config, self.num_steps, learning_rate=float(s.learning_rate),
                                    params=initial_params, global_batch=int(s.batch_size))
        self.data_iter = iter(sft_dataset_from_config(config))
        self.checkpointer = Checkpointer.from_config(config, self.workdir)
        self.is_main = sharding.is_main_process()

    def train_step(self, step: int) -> tuple[dict, list]:
        """One SFT update on the loader's next batch; returns (metrics, no rollouts)."""
        t0 = time.perf_counter()
        raw = next(self.data_iter)
        t_data = time.perf_counter() - t0
        batch, p, c = relayout(raw)
        loss_fn = make_sft_loss(self.policy.model_config, p, c)
        step_fn = self.policy.train_step(loss_fn, batch, self.num_micro, key=("sft", p, c))
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
