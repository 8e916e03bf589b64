"""Continuous batching: rows that finish early are refilled with waiting requests, within fixed shapes.

RL completions run from tens to thousands of tokens, and a static batch decodes until its longest row ends.
`ContinuousEngine` keeps a pool of `max_batch` rows over one KV cache ([rows, kv, head_dim, prompt + new
slots]) and alternates two compiled programs: `insert` prefills waiting prompts (each once, copied to the rows
of its samples) into free rows, and `segment` decodes up to `segment` tokens for every active row, each row at
its own token (`decode.decode_step_rows`). Between segments the host collects finished rows and admits waiting
requests into them. A row's randomness is `fold_in(fold_in(fold_in(PRNGKey(seed), prompt), sample), token)`, as
in `SamplingEngine`, so a request's completion does not depend on which requests share the pool with it, or
when it was admitted.

Built on the sampler core: `core.prefill` for the inserted prompts, `core.finish` for finished rows, the core's
host-side padding and per-row inputs, and the engine's `programs` (so `compile_count` counts insert and segment).
The segment is its own loop rather than `core.decode_loop`: its rows are at different tokens and slots, and it
resumes from a carried state instead of starting from a prefill.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.llama import KVCache
from swerl_jax.sampler.core import (
    RowParams,
    bucket,
    finish,
    left_pad,
    prefill,
    row_key,
    row_params,
    stop_ids,
    uses_filters,
)
from swerl_jax.sampler.decode import decode_step_rows, decode_weights, zeros_cache
from swerl_jax.sampler.engine import SamplingEngine, check_prompt_offset
from swerl_jax.sampler.sampling import sample_tokens
from swerl_jax.sampler.swap import reprefill, row_tokens, token_versions
from swerl_jax.sampler.types import Completion, RequestTooLarge, SamplingParams

# the per-row decode state carried between segments
State = collections.namedtuple("State", "cache kv_mask logits position step active stopped max_new keys "
                                        "temperature top_p top_k out_tok out_lp")


def _insert(config: LlamaConfig, params: dict, state: State, tokens: jax.Array, mask: jax.Array,
            row_src: jax.Array, dest: jax.Array, rows: RowParams) -> State:
    """Prefill `tokens` [prompts, t] once and admit them into rows `dest` (row `dest[i]` takes prompt
    `row_src[i]`; entries with dest = rows are padding and dropped)."""
    t = tokens.shape[1]
    total = state.kv_mask.shape[1]
    first = total - int(state.out_tok.shape[1]) - t  # the prompt ends where the new tokens begin
    logits, pre = prefill(config, params, tokens, mask)
    logits = logits[row_src]
    cache = tuple(KVCache(c.k.at[dest, :, :, first:first + t].set(pre.k[i][row_src].transpose(0, 2, 3, 1)
                                                                   .astype(c.k.dtype), mode="drop"),
                          c.v.at[dest, :, first:first + t].set(pre.v[i][row_src].transpose(0, 2, 1, 3)
                                                                .astype(c.v.dtype), mode="drop"))
                  for i, c in enumerate(state.cache))
    row_mask = jnp.zeros((dest.shape[0], total), bool).at[:, first:first + t].set(mask[row_src])
    def put(a: jax.Array, v: jax.Array) -> jax.Array:
        return a.at[dest].set(v, mode="drop")

    return State(cache, put(state.kv_mask, row_mask), put(state.logits, logits),
                 put(state.position, jnp.sum(mask, axis=-1, dtype=jnp.int32)[row_src]),
                 put(state.step, jnp.zeros_like(dest)), put(state.active, rows.max_new > 0),
                 put(state.stopped, jnp.zeros(dest.shape, bool)), put(state.max_new, rows.max_new),
                 put(state.keys, rows.keys), put(state.temperature, rows.temperature), put(state.top_p, rows.top_p),
                 put(state.top_k, rows.top_k), state.out_tok, state.out_lp)


def _segment(config: LlamaConfig, weights: dict, state: State, stop: jax.Array, *, steps: int,
             use_filters: bool) -> State:
    """Decode up to `steps` tokens for every active row (stops early when none is active)."""
    rows, total = state.kv_mask.shape
    num_new = state.out_tok.shape[1]
    first_new = total - num_new
    r = jnp.arange(rows)

    def body(carry):
        k, s = carry
        keys = jax.vmap(jax.random.fold_in)(s.keys, s.step)
        tok, lp = sample_tokens(s.logits, keys, s.temperature, s.top_p, s.top_k, use_filters)
        at = jnp.where(s.active, s.step, num_new)  # finished / empty rows write nowhere
        out_tok = s.out_tok.at[r, at].set(tok, mode="drop")
        out_lp = s.out_lp.at[r, at].set(lp, mode="drop")
        hit_stop = s.active & jnp.any(tok[:, None] == stop[None, :], axis=-1)
        step = s.step + s.active
        done = hit_stop | (step >= s.max_new)
        slot = first_new + jnp.minimum(s.step, num_new - 1)
        kv_mask = s.kv_mask.at[r, slot].set(s.kv_mask[r, slot] | s.active)
        logits, cache = decode_step_rows(config, weights, tok, s.position, kv_mask, s.cache, slot)
        return k + 1, s._replace(cache=cache, kv_mask=kv_mask, logits=logits, position=s.position + s.active,
                                 step=step, active=s.active & ~done, stopped=s.stopped | hit_stop, out_tok=out_tok,
                                 out_lp=out_lp)

    _, state = jax.lax.while_loop(lambda c: (c[0] < steps) & jnp.any(c[1].active), body, (jnp.int32(0), state))
    return state


class ContinuousEngine(SamplingEngine):
    """`SamplingEngine.generate` with continuous batching (same arguments, same completions for a given seed)."""

    def __init__(self, config: LlamaConfig, params: dict, *, segment: int = 32, partial_rollouts: bool = False,
                 weight_source: Callable[[], tuple[int, dict] | None] | None = None, **kwargs) -> None:
        """`segment`: tokens decoded between two refills (a host round trip each); other arguments as
        `SamplingEngine` (`max_batch` is the pool's rows, the cache holds max_prompt_len + max_new_tokens).
        `partial_rollouts` (sampler.partial_rollouts): between two segments, ask `weight_source` for a newer
        (version, params) and decode on under it without draining (`swap`); every Completion then carries
        `token_versions`. Off, the source is never asked and the completions are those of today."""
        super().__init__(config, params, shared_prefix=False, **kwargs)
        self.segment = segment
        self.partial_rollouts = partial_rollouts
        self.weight_source = weight_source
        self.swaps = 0  # versions taken in flight (between segments), for the sampler's metrics
        # the pool's state (argument 1) is donated to both: each call returns the next one
        self.programs.define("insert", functools.partial(_insert, config), donate_argnums=(1,))
        self.programs.define("segment", functools.partial(_segment, config), static_argnames=("steps", "use_filters"),
                             donate_argnums=(1,))
        # once per generate call, outside the segments; a re-layout of the weights, not a generation program, so
        # it stays out of compile_count
        self.programs.define("weights", functools.partial(decode_weights, config), counted=False)
        self.programs.define("reprefill", functools.partial(reprefill, config), donate_argnums=(1,))

    def _empty_state(self) -> State:
        rows, total, n = self.max_batch, self.max_prompt_len + self.max_new_tokens, self.max_new_tokens
        z = lambda dt: jnp.zeros((rows,), dt)  # noqa: E731
        return State(zeros_cache(self.config, rows, total), jnp.zeros((rows, total), bool),
                     jnp.zeros((rows, self.config.vocab_size), jnp.float32), z(jnp.int32), z(jnp.int32), z(bool),
                     z(bool), z(jnp.int32), jnp.stack([jax.random.PRNGKey(0)] * rows), z(jnp.float32),
                     z(jnp.float32), z(jnp.int32), jnp.zeros((rows, n), jnp.int32), jnp.zeros((rows, n), jnp.float32))

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams = SamplingParams(),
                 num_samples: int = 1, seed: int = 0, max_new_tokens: Sequence[int] | None = None, *,
                 prompt_offset: int = 0) -> list[list[Completion]]:
        """As `SamplingEngine.generate` (`prompt_offset` included), decoding through the refilled pool."""
        sampling.validate()
        check_prompt_offset(prompt_offset)
        prompts = [np.asarray(p, np.int32).reshape(-1) for p in prompts]
        caps = [sampling.max_new_tokens] * len(prompts) if max_new_tokens is None else list(max_new_tokens)
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        for i, (p, cap) in enumerate(zip(prompts, caps)):
            if p.size == 0 or p.size > self.max_prompt_len:
                raise RequestTooLarge(f"prompt {i} has {p.size} tokens; must be 1..{self.max_prompt_len}")
            if not 1 <= cap <= self.max_new_tokens:
                raise RequestTooLarge(f"max_new_tokens[{i}]={cap} is not in [1, {self.max_new_tokens}]")
        base = jax.random.PRNGKey(seed)
        pending = collections.deque((i, j) for i in range(len(prompts)) for j in range(num_samples))
        stop, use_filters = stop_ids(sampling, self.eos_token_ids), uses_filters(sampling)
        weights = self.programs["weights"](self.params)
        state = self._empty_state()
        owner: dict[int, tuple[int, int]] = {}  # row -> (prompt, sample)
        spans: dict[int, list[tuple[int, int]]] = {}  # row -> (first step, version) of each version it decoded
        done: dict[tuple[int, int], Completion] = {}
        while pending or owner:
            if self.partial_rollouts and owner:
                state, swapped = self._take_new_version(state, prompts, owner, spans)
                if swapped:
                    weights = self.programs["weights"](self.params)
            free = [r for r in range(self.max_batch) if r not in owner]
            if pending and free:
                admitted = [pending.popleft() for _ in range(min(len(free), len(pending)))]
                state = self._admit(state, prompts, caps, admitted, free, base, sampling, prompt_offset)
                owner.update(zip(free, admitted))
                spans.update((r, [(0, self.policy_version)]) for r in free[:len(admitted)])
            state = self.programs["segment"](weights, state, stop, steps=self.segment, use_filters=use_filters)
            active, step, stopped = jax.device_get((state.active, state.step, state.stopped))
            finished = [r for r in owner if not active[r]]
            if finished:
                out_tok, out_lp = jax.device_get((state.out_tok, state.out_lp))
                for r in finished:
                    i, j = owner.pop(r)
                    n, row_spans = int(step[r]), spans.pop(r)
                    c = finish(self.tokenizer, row_spans[0][1], prompt_offset + i, j, prompts[i].size,
                               out_tok[r, :n], out_lp[r, :n], bool(stopped[r]), sampling)
                    if self.partial_rollouts:  # off: no field, the Completion of today to the last bit
                        c.token_versions = token_versions(row_spans, c.completion_length)
                    done[(i, j)] = c
        return [[done[(i, j)] for j in range(num_samples)] for i in range(len(prompts))]

    def _take_new_version(self, state: State, prompts: list[np.ndarray], owner: dict[int, tuple[int, int]],
                          spans: dict[int, list[tuple[int, int]]]) -> tuple[State, bool]:
        """(state, whether a newer version was taken): between two segments, a newer version from the weight
        source replaces the params, every row in flight is re-prefilled under it (`swap.reprefill`) and its next
        token is recorded as the new version's."""
        got = self.weight_source() if self.weight_source is not None else None
        if got is None or got[0] <= self.policy_version:
            return state, False
        self.update_params(got[1], got[0])
        self.swaps += 1
        steps, out_tok = jax.device_get((state.step, state.out_tok))
        rows, total = state.kv_mask.shape
        tokens = row_tokens(rows, total, self.max_new_tokens, self.pad_token_id,
                            {r: prompts[i] for r, (i, _) in owner.items()}, steps, out_tok)
        for r in owner:
            spans[r].append((int(steps[r]), self.policy_version))
        return self.programs["reprefill"](self.params, state, tokens), True

    def _admit(self, state: State, prompts: list[np.ndarray], caps: list[int], admitted: list[tuple[int, int]],
               free: list[int], base: jax.Array, sampling: SamplingParams, prompt_offset: int = 0) -> State:
        """Prefill the admitted requests' prompts (each once) into their rows (prompt i's keys are those of
        prompt `prompt_offset + i`)."""
        unique = list(dict.fromkeys(i for i, _ in admitted))
        n_p = bucket(len(unique), self.batch_buckets, "prompts per insert")
        t = bucket(max(prompts[i].size for i in unique), self.prompt_buckets, "prompt length")
        tokens, mask = left_pad([prompts[i] for i in unique], n_p, t, self.pad_token_id)
        n_rows = bucket(len(admitted), self.batch_buckets, "rows per insert")
        # padding entries' dest is out of range: the insert drops them
        row_src, dest = np.zeros(n_rows, np.int32), np.full(n_rows, self.max_batch, np.int32)
        max_new = np.zeros(n_rows, np.int32)
        keys = [base] * n_rows
        for k, ((i, j), row) in enumerate(zip(admitted, free)):
            row_src[k], dest[k], max_new[k] = unique.index(i), row, caps[i]
            keys[k] = row_key(base, prompt_offset + i, j)
        return self.programs["insert"](self.params, state, tokens, mask, row_src, dest,
                                       row_params(sampling, keys, max_new))
