"""Multi-turn generation with each conversation's K/V kept between turns (no re-prefill of the transcript).

An agent episode grows turn by turn: task, the model's action, the tool's observation, the next action, ... A
stateless sampler (`agent.rollout.Reprefill`) prefills the whole conversation again for every turn, so an
episode of n turns prefills O(n^2) tokens. `KeptKV` keeps one decode cache per batch of conversations (a
*session*: every episode of one `first_turn` call) and, for each later turn, prefills only the tokens added since
(the observation and the next assistant header) at the slots after the row's cached ones, then decodes as the
engine does (`decode.decode_step` on the same cache layout).

Layout. A session's cache has `slots` key/value slots per row, written left to right at a pointer shared by all
rows (turn 1: the left-padded prompt, then `num_new` decode slots; each later turn: a left-padded chunk of the new
tokens, then `num_new` decode slots). A row's valid slots are tracked on the host (`kv_mask`): padding, the slots of
tokens sampled after a row stopped and the tokens a stop string trimmed are never attended. When the pointer would
run past `slots`, the session is compacted: the conversations are prefilled again into a fresh cache, pointer 0.

Same tokens as `Reprefill`: row randomness is the engine's (`fold_in(fold_in(PRNGKey(seed), i), j)` then the token
index; i the context's index in the request, j the sample), per-row caps replace the cut of a longer completion,
and stop strings are trimmed by the engine's own `_finish`. The K/V of earlier turns come from decode steps
rather than one prefill, so logits agree to float rounding (~1e-6 in fp32), not bit for bit.

Built on the sampler core: `core.prefill` (over the kept cache, at the session's pointer) and `core.decode_loop`,
with the engine's public settings, and its `programs`, where the extend program is defined once per engine (every
`KeptKV` over an engine shares it, and the engine's `compile_count` counts it).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.llama import KVCache
from swerl_jax.sampler.core import (
    RowParams,
    bucket,
    decode_loop,
    finish,
    left_pad,
    prefill,
    row_key,
    row_params,
    stop_ids,
    uses_filters,
)
from swerl_jax.sampler.decode import decode_step, decode_weights, zeros_cache
from swerl_jax.sampler.engine import SamplingEngine
from swerl_jax.sampler.types import Completion, RequestTooLarge, SamplingParams


def _to_llama(cache: tuple[KVCache, ...]) -> KVCache:
    """The decode layout (per layer k [rows, kv, d, slots], v [rows, kv, slots, d]) as Llama's stacked one."""
    return KVCache(jnp.stack([c.k.transpose(0, 3, 1, 2) for c in cache]),
                   jnp.stack([c.v.transpose(0, 2, 1, 3) for c in cache]))


def _to_decode(cache: KVCache) -> tuple[KVCache, ...]:
    return tuple(KVCache(cache.k[i].transpose(0, 2, 3, 1), cache.v[i].transpose(0, 2, 1, 3))
                 for i in range(cache.k.shape[0]))


def _extend(config: LlamaConfig, params: dict, cache: tuple[KVCache, ...], kv_mask: jax.Array, slot: jax.Array,
            tokens: jax.Array, mask: jax.Array, positions: jax.Array, rows: RowParams, stop: jax.Array, *,
            num_new: int, use_filters: bool):
    """Prefill the chunk `tokens` [rows, t] (left padded, `mask`) at slots [slot, slot + t) of each row's kept
    cache, then decode up to `num_new` tokens at [slot + t, slot + t + num_new)."""
    n_rows, t = tokens.shape
    kv_mask = jax.lax.dynamic_update_slice_in_dim(kv_mask, mask, slot, axis=1)
    logits, stacked = prefill(config, params, tokens, kv_mask, positions=positions, cache=_to_llama(cache),
                              start=slot)
    cache = _to_decode(stacked)
    weights = decode_weights(config, params)
    first = slot + t

    def step_fn(tok, position, step, cache, kv_mask):
        at = first + step
        kv_mask = jax.lax.dynamic_update_slice_in_dim(kv_mask, jnp.ones((n_rows, 1), bool), at, axis=1)
        logits, cache = decode_step(config, weights, tok, position, kv_mask, cache, at)
        return logits, (cache, kv_mask)

    out_tok, out_lp, length, stopped, (cache, _) = decode_loop(
        step_fn, (cache, kv_mask), logits, positions[:, -1] + 1, rows, stop, num_new, use_filters)
    return out_tok, out_lp, length, stopped, cache


@dataclasses.dataclass
class _Session:
    """The kept caches of one batch of conversations (rows), and what each row's cache holds."""

    cache: tuple[KVCache, ...] | None
    kv_mask: np.ndarray  # [rows, slots] bool: slots holding a token of the row's conversation
    pointer: int  # the next free slot (shared by all rows)
    tokens: list[np.ndarray]  # per row: the conversation whose K/V the cache holds, in order


class KeptKV:
    """A `agent.rollout.TurnGenerator` over an in-process `SamplingEngine` that keeps each conversation's K/V.

    `slots` is a session's cache length per row (default: twice the longest conversation, so compaction is rare;
    at least the engine's longest prompt and turn, so a compacted session always fits).
    """

    def __init__(self, engine: SamplingEngine, max_context: int, slots: int | None = None) -> None:
        self.engine, self.max_context = engine, int(max_context)
        least = engine.prompt_buckets[-1] + engine.new_token_buckets[-1]  # a compacted session's first turn
        self.slots = int(slots or max(2 * self.max_context, least))
        if self.slots < least:
            raise ValueError(f"slots={self.slots}: a session needs room for the engine's longest prompt and turn "
                             f"({engine.prompt_buckets[-1]} + {engine.new_token_buckets[-1]})")
        self.sessions: list[_Session] = []
        self.compactions = 0
        self.prefilled_tokens = 0  # tokens run through a prefill (the cost `Reprefill` pays for every turn)
        # One compiled program per engine (a generator lives for one step's episodes; its programs must not):
        # `define` returns the engine's program when an earlier KeptKV defined it. The cache (argument 1) is donated.
        engine.programs.define("extend", functools.partial(_extend, engine.config),
                               static_argnames=("num_new", "use_filters"), donate_argnums=(1,))

    @classmethod
    def for_sampler(cls, sampler, config) -> KeptKV:
        """Over the trainer's inline sampler (`rl.collect.InlineSampler`) for `config.agent.max_context`."""
        engine = getattr(sampler, "engine", None)
        if engine is None:
            raise ValueError("agent.kv_cache='kept' needs the trainer's own engine (sampler.mode='inline')")
        return cls(engine, int(config.agent.max_context))

    # --- TurnGenerator ------------------------------------------------------------------------------------------

    def first_turn(self, prompts: Sequence[np.ndarray], num_samples: int, sampling: SamplingParams, seed: int,
                   min_policy_version: int) -> list[list[Completion]]:
        """`num_samples` completions of each prompt; their rows become a new session."""
        self._check_version(min_policy_version)
        contexts = [np.asarray(p, np.int32) for p in prompts for _ in range(num_samples)]
        empty = [np.zeros(0, np.int32)] * len(contexts)
        session = _Session(None, np.zeros((len(contexts), self.slots), bool), 0, empty)
        self.sessions.append(session)
        ids = [(i, j) for i in range(len(prompts)) for j in range(num_samples)]
        got = self._turn(session, list(range(len(contexts))), contexts, [sampling.max_new_tokens] * len(contexts),
                         ids, sampling, seed)
        return [got[i * num_samples:(i + 1) * num_samples] for i in range(len(prompts))]

    def next_turn(self, contexts: Sequence[np.ndarray], caps: Sequence[int], sampling: SamplingParams, seed: int,
                  min_policy_version: int) -> list[Completion]:
        """One completion per context (a conversation of an earlier turn plus the tokens added since)."""
        self._check_version(min_policy_version)
        contexts = [np.asarray(c, np.int32) for c in contexts]
        session, rows = self._find_rows(contexts)
        return self._turn(session, rows, contexts, list(caps), [(i, 0) for i in range(len(contexts))], sampling,
                          seed)

    # --- internals ----------------------------------------------------------------------------------------------

    def _check_version(self, version: int) -> None:
        if self.engine.policy_version < version:
            raise RuntimeError(f"the engine has policy version {self.engine.policy_version}, the turn needs {version}")

    def _find_rows(self, contexts: list[np.ndarray]) -> tuple[_Session, list[int]]:
        """The session and row whose kept conversation each context extends (samples with equal transcripts are
        interchangeable: their caches hold the same tokens)."""
        for session in self.sessions:
            taken: set[int] = set()
            rows = []
            for c in contexts:
                row = next((r for r, kept in enumerate(session.tokens) if r not in taken and 0 < kept.size < c.size
                            and np.array_equal(c[:kept.size], kept)), None)
                if row is None:
                    break
                taken.add(row)
                rows.append(row)
            else:
                return session, rows
        raise ValueError("a context does not extend any kept conversation of this generator's sessions (a new "
                         "episode starts with first_turn)")

    def _turn(self, session: _Session, rows: list[int], contexts: list[np.ndarray], caps: list[int],
              ids: list[tuple[int, int]], sampling: SamplingParams, seed: int) -> list[Completion]:
        engine = self.engine
        sampling.validate()
        for cap in caps:
            if not 1 <= cap <= engine.max_new_tokens:
                raise RequestTooLarge(f"max_new_tokens {cap} is not in [1, {engine.max_new_tokens}]")
        new = [c[session.tokens[r].size:] for r, c in zip(rows, contexts)]
        num_new = bucket(max(caps), engine.new_token_buckets, "max_new_tokens")
        t = bucket(max(n.size for n in new), engine.prompt_buckets, "new tokens of a turn")
        if session.cache is None or session.pointer + t + num_new > self.slots:
            if session.cache is not None:
                self.compactions += 1
            self._compact(session, rows, contexts)
            new = [c[session.tokens[r].size:] for r, c in zip(rows, contexts)]
            t = bucket(max(n.size for n in new), engine.prompt_buckets, "new tokens of a turn")
        if session.pointer + t + num_new > self.slots:
            raise RequestTooLarge(f"a turn of {t} + {num_new} slots does not fit a session of {self.slots}")
        n_rows = len(session.tokens)
        chunks = [np.zeros(0, np.int32)] * n_rows
        positions = np.zeros((n_rows, t), np.int32)
        max_new = np.zeros(n_rows, np.int32)  # 0: a row without a turn (its conversation ended) decodes nothing
        base = jax.random.PRNGKey(seed)
        keys = [base] * n_rows
        for k, (r, n) in enumerate(zip(rows, new)):
            chunks[r] = n
            positions[r, t - n.size:] = session.tokens[r].size + np.arange(n.size)
            max_new[r] = caps[k]
            keys[r] = row_key(base, *ids[k])
        # rows without a turn hold one token, valid for this call only, so that no attention row is empty
        tokens, mask = left_pad(chunks, n_rows, t, engine.pad_token_id)
        idle = np.setdiff1d(np.arange(n_rows), rows)
        out_tok, out_lp, length, stopped, session.cache = engine.programs["extend"](
            engine.params, session.cache, session.kv_mask, np.int32(session.pointer), tokens, mask, positions,
            row_params(sampling, keys, max_new), stop_ids(sampling, engine.eos_token_ids), num_new=num_new,
            use_filters=uses_filters(sampling))
        out_tok, out_lp, length, stopped = jax.device_get((out_tok, out_lp, length, stopped))
        self.prefilled_tokens += int(sum(n.size for n in new))
        session.kv_mask[:, session.pointer:session.pointer + t] = mask
        session.kv_mask[idle, session.pointer + t - 1] = False
        first = session.pointer + t
        session.pointer = first + num_new
        out = []
        for k, (r, c) in enumerate(zip(rows, contexts)):
            n = int(length[r])
            done = finish(engine.tokenizer, engine.policy_version, ids[k][0], ids[k][1], c.size, out_tok[r, :n],
                          out_lp[r, :n], bool(stopped[r]), sampling)
            kept = len(done.tokens)  # a stop string may have trimmed tokens whose K/V were written: not kept
            session.kv_mask[r, first:first + kept] = True
            session.tokens[r] = np.concatenate([c, done.tokens])
            out.append(done)
        return out

    def _compact(self, session: _Session, rows: list[int], contexts: list[np.ndarray]) -> None:
        """A fresh cache holding nothing yet: the next chunk prefills each row's whole conversation (slot 0 on)."""
        engine = self.engine
        n_rows = len(session.tokens)
        session.cache = zeros_cache(engine.config, n_rows, self.slots)
        session.kv_mask[:] = False
        session.pointer = 0
        for r in range(n_rows):
            session.tokens[r] = np.zeros(0, np.int32)
        longest = max(c.size for c in contexts)
        if longest > engine.max_prompt_len:
            raise RequestTooLarge(f"a conversation of {longest} tokens exceeds sampler.max_prompt_len "
                                  f"{engine.max_prompt_len}")
