"""Loader throughput: records/s and prompt tokens/s of our Grain RL pipeline vs a plain Python loop, on the real
PR records (full SWE-RL prompts of 2.4k-9.7k SmolLM2 tokens, max_prompt_len 16384), and the rate training needs.

    .venv/bin/python benchmarks/loader_throughput.py [--records ../shared/data/pr_records_requests_flask.jsonl]
        [--epochs 4] [--workers 0 2] [--batch 4] [--max-prompt-len 16384]

Ours: `rl_dataset` (Grain: shard, seeded shuffle, repeat, decode + validate + SWE-RL prompt + budget + tokenize
+ left pad in `worker_count` processes, counted filter, batch). Peer: a plain loop, no Grain: json.loads, the
same chat messages, `apply_chat_template` + tokenizer, numpy left pad, list batching (no validation, no
budget). Both read the same file for the same number of epochs and produce the same prompt ids. Worker start-up
(tokenizer load) is excluded for both: the first batch is taken before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import numpy as np

from swerl_jax.data.loader import record_source, rl_dataset
from swerl_jax.data.prompts import messages_for
from swerl_jax.tokenizer import load_tokenizer

DEFAULT = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "pr_records_requests_flask.jsonl"


def ours(path: str, epochs: int, workers: int, batch: int, max_len: int) -> tuple[float, float, int]:
    """(records/s, tokens/s, records) of the Grain pipeline after its first batch."""
    it = iter(rl_dataset(record_source([path]), batch_size=batch, max_prompt_len=max_len, num_epochs=epochs,
                         seed=0, shuffle=True, shard_index=0, shard_count=1, worker_count=workers,
                         drop_remainder=False))
    next(it)
    n = tokens = 0
    t0 = time.perf_counter()
    for b in it:
        n += len(b["instance_id"])
        tokens += int(b["prompt_len"].sum())
    dt = time.perf_counter() - t0
    if hasattr(it, "close"):
        it.close()
    return n / dt, tokens / dt, n


def peer(path: str, epochs: int, batch: int, max_len: int) -> tuple[float, float, int]:
    """(records/s, tokens/s, records) of a plain Python loop doing the same prompt + tokenize + pad."""
    tok = load_tokenizer()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    tok("warm up", add_special_tokens=False)
    n = tokens = 0
    t0 = time.perf_counter()
    rows = []
    for _ in range(epochs):
        with open(path, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                text = tok.apply_chat_template(messages_for(r["problem_statement"], list(r["code_context"].items())),
                                               tokenize=False, add_generation_prompt=True)
                ids = tok(text, add_special_tokens=False)["input_ids"][-max_len:]
                row = np.full((max_len,), pad, np.int32)
                row[max_len - len(ids):] = ids
                rows.append(row)
                n += 1
                tokens += len(ids)
                if len(rows) == batch:
                    np.stack(rows)
                    rows = []
    dt = time.perf_counter() - t0
    return n / dt, tokens / dt, n


def main() -> None:
    """Print both rates, their ratio, and the rate a training step needs."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", default=str(DEFAULT))
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--max-prompt-len", type=int, default=16384)
    a = p.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; records {a.records} x {a.epochs} epochs; max_prompt_len {a.max_prompt_len}")
    pr, pt, pn = peer(a.records, a.epochs, a.batch, a.max_prompt_len)
    print(f"peer (plain loop, no Grain):    {pr:7.1f} records/s  {pt:9.0f} tokens/s  ({pn} records)")
    for w in a.workers:
        r, t, n = ours(a.records, a.epochs, w, a.batch, a.max_prompt_len)
        print(f"ours (Grain, {w} workers):       {r:7.1f} records/s  {t:9.0f} tokens/s  ({n} records after the "
              f"first batch)  ratio ours/peer {r / pr:.2f}")
    # SWE-RL: 32 prompts per step, 1,600 steps in ~32 h on 64 nodes -> one step every ~72 s.
    step_s = 32 * 3600 / 1600
    need = 32 / step_s
    print(f"training needs (SWE-RL 70B: 32 prompts per ~{step_s:.0f} s step): {need:.2f} records/s in total, "
          f"{need / 64:.4f} per host of 64")


if __name__ == "__main__":
    main()
