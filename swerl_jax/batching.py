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


def pack_segments(prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                  target_masks: Sequence[Sequence[float]] | None, width_multiple: int = 64, row_multiple: int = 1,
                  pad_id: int = PAD_ID) -> dict[str, np.ndarray]:
    """Pack whole examples (prompt + target, never split) into as few rows as first-fit decreasing finds.

    A batch of short examples padded to its longest (`pack_rows`) computes mostly padding: the CPU testbed's SFT
    rows were 52% real tokens, and attention's cost grows with the square of the row. Packed rows hold several
    examples side by side, each its own segment (`segment_ids` 1, 2, ... in the row; 0 is padding), which the
    model keeps apart: attention only within a segment, RoPE positions restarting at 0 (`positions`). The loss is
    the same token-mean: `loss_mask` [R, W] weighs column j by the target token at j + 1 of the same segment
    (`target_masks`' weight, 1 without one), and `score_positions` lists those columns.

    The row width W is the longest example rounded up to `width_multiple`; the row count R the fewest bins, the
    same on every process and a multiple of `row_multiple` (the batch shards a process holds), padded with empty
    rows. Examples keep their order within a row, so the packing is a pure function of the batch.
    """
    if any(len(p) == 0 for p in prompts):
        raise ValueError("pack_segments: an example has an empty prompt (its first target token has no column to be "
                         "predicted from)")
    lengths = [len(p) + len(t) for p, t in zip(prompts, targets, strict=True)]
    width = global_max(-(-max(lengths) // width_multiple) * width_multiple)
    free: list[int] = []
    rows_of: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        row = next((r for r, room in enumerate(free) if room >= lengths[i]), None)
        if row is None:
            free.append(width)
            rows_of.append([])
            row = len(free) - 1
        free[row] -= lengths[i]
        rows_of[row].append(i)
    n = global_max(-(-len(rows_of) // row_multiple) * row_multiple)
    tokens = np.full((n, width), pad_id, np.int32)
    segments = np.zeros((n, width), np.int32)
    positions = np.zeros((n, width), np.int32)
    loss_mask = np.zeros((n, width), np.float32)
    for r, members in enumerate(rows_of):
        col = 0
        for s, i in enumerate(sorted(members), start=1):
            p, t = np.asarray(prompts[i]), np.asarray(targets[i])
            end = col + len(p) + len(t)
            tokens[r, col:end] = np.concatenate([p, t])
            segments[r, col:end] = s
            positions[r, col:end] = np.arange(end - col)
            weights = np.ones(len(t), np.float32) if target_masks is None else np.asarray(target_masks[i], np.float32)
            # target token k sits at column col + len(p) + k and is predicted from the column before it
            loss_mask[r, col + len(p) - 1:end - 1] = weights
            col = end
    return {"tokens": tokens, "attention_mask": segments > 0, "segment_ids": segments, "positions": positions,
            "loss_mask": loss_mask, "score_positions": score_positions(loss_mask)}
