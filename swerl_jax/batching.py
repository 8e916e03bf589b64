"""The one row layout both trainers use: [left-padded prompt | right-padded completion], lengths bucketed.

    p, c = row_shape(prompts, completions, prompt_bucket=64, completion_bucket=32, prompt_cap=1024,
                     completion_cap=256)          # the same (p, c) on every process: the longest row anywhere
    rows = pack_rows(prompts, completions, p, c)  # tokens [N, p + c], attention_mask [N, p + c], loss_mask [N, c]

The loader emits unpadded token ids (prompts for GRPO; prompt + oracle answer for SFT) and this module is the
only place that pads them, once, between the loader and the loss. Completion token j sits at column p + j and is
predicted from column p + j - 1, so a loss scores the window [p - 1, p - 1 + c) (`token_logprobs(start=p - 1,
length=c)`): the vocabulary projection runs on the c completion positions only. Bucketing keeps the number of
distinct shapes, and so of train-step compilations, to a few per run (at most 2x padding). Padding is token 0,
masked out of attention and of the loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

PAD_ID = 0


def bucket_length(length: int, multiple: int, cap: int) -> int:
    """The smallest of multiple * 2^k (k >= 0) and `cap` that holds `length`: a few shapes per run (each one a
    train-step compilation), at most 2x padding."""
    if length > cap:
        raise ValueError(f"length {length} exceeds the cap {cap}")
    size = multiple
    while size < length:
        size *= 2
    return min(cap, size)


def global_max(value: int) -> int:
    """The largest `value` over all processes (e.g. a batch's longest row, so every process pads to one shape)."""
    if jax.process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils  # multi-process runs only

    return int(np.max(multihost_utils.process_allgather(np.asarray(value, np.int32))))


def row_shape(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], *, prompt_bucket: int,
              completion_bucket: int, prompt_cap: int, completion_cap: int) -> tuple[int, int]:
    """(prompt_len, completion_len) for these rows: each side's longest row over all processes, bucketed; an
    empty completion still gets one column (the loss window is never empty)."""
    p = bucket_length(global_max(max(len(x) for x in prompts)), prompt_bucket, prompt_cap)
    c = bucket_length(global_max(max(1, max(len(x) for x in completions))), completion_bucket, completion_cap)
    return p, c


def pack_rows(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], prompt_len: int,
              completion_len: int, pad_id: int = PAD_ID) -> dict[str, np.ndarray]:
    """Lay out rows as [prompt left-padded to `prompt_len` | completion right-padded to `completion_len`].

    Returns tokens and attention_mask [N, prompt_len + completion_len] (int32, bool) and loss_mask
    [N, completion_len] (float32, 1 on completion tokens). Raises ValueError naming the row that does not fit.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    n, width = len(prompts), prompt_len + completion_len
    tokens = np.full((n, width), pad_id, np.int32)
    attention = np.zeros((n, width), bool)
    loss_mask = np.zeros((n, completion_len), np.float32)
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        p, c = len(prompt), len(completion)
        if p > prompt_len or c > completion_len:
            raise ValueError(f"row {i}: prompt {p} or completion {c} tokens exceed the batch shape "
                             f"({prompt_len}, {completion_len})")
        tokens[i, prompt_len - p:prompt_len] = prompt
        tokens[i, prompt_len:prompt_len + c] = completion
        attention[i, prompt_len - p:prompt_len + c] = True
        loss_mask[i, :c] = 1.0
    return {"tokens": tokens, "attention_mask": attention, "loss_mask": loss_mask}


def score_positions(loss_mask: np.ndarray, multiple: int = 32) -> np.ndarray:
    """[rows, K] indices of each row's loss positions (where `loss_mask` [rows, C] > 0), padded with C (dropped by
    `token_logprobs(positions=...)`); K is the most any row has, rounded up to `multiple` (few shapes) and at
    most C, the same on every process. A multi-turn row's loss covers the model's turns only, so only those
    are projected onto the vocabulary.
    """
    rows, width = loss_mask.shape
    on = loss_mask > 0
    k = min(width, bucket_length(global_max(max(1, int(on.sum(axis=1).max(initial=0)))), multiple, width))
    out = np.full((rows, k), width, np.int32)
    for i in range(rows):
        idx = np.flatnonzero(on[i])
        out[i, :idx.size] = idx
    return out
