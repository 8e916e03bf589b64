"""Partial rollouts inside the sampler: a new policy version taken between decode segments, without draining.

AReaL, slime `--partial-rollout` and verl `partial_rollout` let a generation that is in flight continue under
the weights published while it runs, instead of holding the old version until every row has ended.
`ContinuousEngine(partial_rollouts=True, weight_source=...)` asks its source between two segments; when a newer
version is there it swaps the params in and calls `reprefill`, which recomputes every row's K/V and next-token
logits under the new weights (the rows keep their tokens, positions, keys and caps). Recomputing the cache, as
AReaL does after an interrupt, is what makes each token's behaviour log-prob exactly the log-prob of the whole
sequence under the version that sampled it: with the old K/V kept, the tokens after a swap would be drawn from a
mix of two versions that no trainer can recompute.

Each row records the decode step at which each version took over (`spans`); `token_versions` turns them into the
version of every generated token, which `Completion.token_versions` carries to `Rollout.token_versions`, the
per-token staleness metrics and bound (`rl.producer.token_staleness`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.llama import KVCache, Llama, positions_from_mask


def reprefill(config: LlamaConfig, params: dict, state, tokens: jax.Array):
    """The continuous engine's `State` with every row's cache and next-token logits recomputed under `params`.

    tokens [rows, slots]: each row's prompt (ending at the first new-token slot) and the tokens it has generated,
    at the slots `state.kv_mask` marks. A row's next token is predicted at its last marked slot: the new-token
    slot `step - 1`, or the prompt's last slot at step 0. A row with no marked slot (empty) keeps one marked so
    that no attention row is fully masked; nothing reads it.
    """
    rows, total = state.kv_mask.shape
    first_new = total - state.out_tok.shape[1]
    mask = state.kv_mask.at[:, -1].set(state.kv_mask[:, -1] | ~jnp.any(state.kv_mask, axis=-1))
    model = Llama(config)
    variables = {"params": params}
    cache = KVCache.zeros(config, rows, total, dtype=config.dtype)
    hidden, pre = model.apply(variables, tokens, positions_from_mask(mask), mask, cache, 0, return_hidden=True)
    last = jnp.clip(first_new + state.step - 1, 0, total - 1)
    logits = model.apply(variables, hidden[jnp.arange(rows), last], method=Llama.logits).astype(jnp.float32)
    new_cache = tuple(KVCache(pre.k[i].transpose(0, 2, 3, 1).astype(c.k.dtype),
                              pre.v[i].transpose(0, 2, 1, 3).astype(c.v.dtype)) for i, c in enumerate(state.cache))
    return state._replace(cache=new_cache, logits=logits)


def row_tokens(rows: int, total: int, num_new: int, pad_id: int, owned: dict[int, np.ndarray],
               steps: np.ndarray, out_tok: np.ndarray) -> np.ndarray:
    """`reprefill`'s tokens [rows, total]: row r of `owned` holds its prompt right-aligned before the first
    new-token slot (where `_insert` put it) and its `steps[r]` generated tokens after it; other slots are pad."""
    first_new = total - num_new
    tokens = np.full((rows, total), pad_id, np.int32)
    for r, prompt in owned.items():
        tokens[r, first_new - prompt.size:first_new] = prompt
        tokens[r, first_new:first_new + int(steps[r])] = out_tok[r, :int(steps[r])]
    return tokens


def token_versions(spans: Sequence[tuple[int, int]], length: int) -> np.ndarray:
    """int32 [length]: the version of each generated token, from (first step, version) spans in step order."""
    out = np.empty(length, np.int32)
    for k, (start, version) in enumerate(spans):
        end = spans[k + 1][0] if k + 1 < len(spans) else length
        out[min(start, length):min(end, length)] = version
    return out
