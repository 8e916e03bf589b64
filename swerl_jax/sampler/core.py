"""The sampler core that every engine composes: buckets, the prefill, the decode loop, per-row sampling inputs and
the host-side finish of a completion, plus the registry of an engine's compiled programs.

Contract. The static engine (`engine.SamplingEngine`, plain and shared-prompt programs), the continuous engine
(`continuous.ContinuousEngine`) and the kept-K/V sessions (`sessions.KeptKV`) differ only in their cache layout
and in where a prompt's K/V goes; they all
  * pad on the host with `bucket` / `left_pad` / `stop_ids` / `row_params` (fixed shapes: a handful of programs),
  * run a prompt (or a turn's new tokens) through the model once with `prefill`, inside their jitted program,
  * decode with `decode_loop` (a `jax.lax.while_loop`: sample, record, stop, step the model; no host round trip
    per token), except the continuous engine, whose rows sit at different tokens (it samples with the same
    `sampling.sample_tokens` and the same per-row keys),
  * turn a row's tokens and log-probs into a `Completion` with `finish` (text, stop strings),
  * compile through `Programs`, which counts traces (`compile_count`) and holds each program once per engine.
Row randomness, for every engine: row (prompt i, sample j) draws token n from
`fold_in(row_key(PRNGKey(seed), i, j), n)`, so a row's samples depend on neither its batch nor its padding.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.llama import KVCache, Llama, positions_from_mask
from swerl_jax.sampler.sampling import sample_tokens
from swerl_jax.sampler.types import Completion, RequestTooLarge, SamplingParams

# --- host side: shapes and per-row inputs -----------------------------------------------------------------------


def default_buckets(limit: int, start: int) -> tuple[int, ...]:
    """Powers of two from `start` below `limit`, then `limit` itself."""
    out, b = [], start
    while b < limit:
        out.append(b)
        b *= 2
    return (*out, limit)


def bucket(n: int, buckets: Sequence[int], what: str) -> int:
    """The smallest of the sorted `buckets` >= n; RequestTooLarge (naming `what`) when none is."""
    i = bisect.bisect_left(buckets, n)
    if i == len(buckets):
        raise RequestTooLarge(f"{what}={n} exceeds the engine's largest bucket {buckets[-1]}")
    return buckets[i]


def left_pad(seqs: Sequence[np.ndarray], rows: int, length: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, mask) [rows, length]: row k holds seqs[k] right-aligned (left padding, so every row's last column is
    its newest token); rows past len(seqs) and empty sequences are padding. Every row's last slot is marked valid,
    a padding row's included, because a fully masked attention row would be NaN; nothing reads those rows."""
    tokens = np.full((rows, length), pad_id, np.int32)
    mask = np.zeros((rows, length), bool)
    mask[:, -1] = True
    for k, s in enumerate(seqs):
        if s.size:
            tokens[k, length - s.size:] = s
            mask[k, length - s.size:] = True
    return tokens, mask


def stop_ids(sampling: SamplingParams, eos_token_ids: Sequence[int]) -> np.ndarray:
    """The stop tokens as an int32 array of at least one entry: the request's, else the engine's EOS ids; -1 (never
    sampled) fills an empty set, so the program's shape does not depend on whether any stop token is set."""
    stop = sampling.stop_token_ids if sampling.stop_token_ids is not None else eos_token_ids
    out = np.full(max(1, len(stop)), -1, np.int32)
    out[:len(stop)] = stop
    return out


def uses_filters(sampling: SamplingParams) -> bool:
    """Whether top-k / top-p are on (static in the programs: off, they skip a vocabulary sort per token)."""
    return sampling.top_k > 0 or sampling.top_p < 1.0


def row_key(base: jax.Array, prompt_index: int, sample_index: int) -> jax.Array:
    """The PRNG key of sample `sample_index` of prompt `prompt_index` (its tokens fold in their index)."""
    return jax.random.fold_in(jax.random.fold_in(base, prompt_index), sample_index)


class RowParams(NamedTuple):
    """Per-row sampling inputs of a compiled program, each [rows] (a pytree: one jit argument)."""

    keys: jax.Array  # PRNG keys (`row_key`)
    max_new: jax.Array  # int32 cap on new tokens; 0 = an empty row, done before it starts
    temperature: jax.Array  # float32
    top_p: jax.Array  # float32
    top_k: jax.Array  # int32


def row_params(sampling: SamplingParams, keys: Sequence[jax.Array], max_new: np.ndarray) -> RowParams:
    """`RowParams` for len(keys) rows that share one request's `sampling`."""
    rows = len(keys)
    return RowParams(jnp.stack(list(keys)), np.asarray(max_new, np.int32),
                     np.full(rows, sampling.temperature, np.float32), np.full(rows, sampling.top_p, np.float32),
                     np.full(rows, sampling.top_k, np.int32))


# --- device side: the prefill and the decode loop ---------------------------------------------------------------


def prefill(config: LlamaConfig, params: dict, tokens: jax.Array, mask: jax.Array, *,
            positions: jax.Array | None = None, cache: KVCache | None = None, start: jax.Array | int = 0
            ) -> tuple[jax.Array, KVCache]:
    """Run left-padded `tokens` [rows, t] through the model at cache slots [start, start + t); return the logits of
    each row's last token ([rows, vocab] fp32: with left padding it is the row's newest real token) and the cache.

    Defaults: a fresh cache of t slots per row and positions counted along `mask` (a prompt). A caller extending
    kept K/V passes its stacked cache, the row mask over all its slots, the positions and the first slot.
    """
    model = Llama(config)
    variables = {"params": params}
    if cache is None:
        cache = KVCache.zeros(config, tokens.shape[0], tokens.shape[1], dtype=config.dtype)
    if positions is None:
        positions = positions_from_mask(mask)
    hidden, cache = model.apply(variables, tokens, positions, mask, cache, start, return_hidden=True)
    # only the last position's logits are needed: the vocabulary head runs on [rows, embed], not [rows, t, embed]
    return model.apply(variables, hidden[:, -1], method=Llama.logits), cache


def decode_loop(step_fn: Callable, carry: tuple, logits: jax.Array, position: jax.Array, rows: RowParams,
                stop: jax.Array, num_new: int, use_filters: bool
                ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, tuple]:
    """Sample, record and decode until every row has stopped or `num_new` tokens.

    step_fn(tokens [rows], positions [rows], step, *carry) -> (logits, carry) runs the model one token (the engine's
    cache layout lives in `carry`); `logits` are the prefill's, `position` the first new token's positions.
    Returns (tokens [rows, num_new] int32, log-probs [rows, num_new] fp32, lengths [rows], stopped [rows]: ended
    by a stop token, carry). Tokens past a row's length are 0 (log-prob 0).
    """
    n_rows = logits.shape[0]
    done = rows.max_new <= 0
    state = (jnp.int32(0), carry, logits, position, done, jnp.zeros((n_rows,), jnp.int32),
             jnp.zeros((n_rows,), bool), jnp.zeros((n_rows, num_new), jnp.int32),
             jnp.zeros((n_rows, num_new), jnp.float32))

    def cond(s):
        return (s[0] < num_new) & ~jnp.all(s[4])

    def body(s):
        step, carry, logits, position, done, length, stopped, out_tok, out_lp = s
        keys = jax.vmap(jax.random.fold_in, (0, None))(rows.keys, step)
        tok, lp = sample_tokens(logits, keys, rows.temperature, rows.top_p, rows.top_k, use_filters)
        tok = jnp.where(done, 0, tok)
        lp = jnp.where(done, 0.0, lp)
        out_tok = jax.lax.dynamic_update_slice_in_dim(out_tok, tok[:, None], step, axis=1)
        out_lp = jax.lax.dynamic_update_slice_in_dim(out_lp, lp[:, None], step, axis=1)
        hit_stop = ~done & jnp.any(tok[:, None] == stop[None, :], axis=-1)
        length = jnp.where(done, length, step + 1)
        stopped = stopped | hit_stop
        done = done | hit_stop | (step + 1 >= rows.max_new)
        # a finished row still steps the model (fixed shapes); its token is masked out above and never read
        new_logits, carry = step_fn(tok, position, step, *carry)
        return (step + 1, carry, new_logits, position + 1, done, length, stopped, out_tok, out_lp)

    _, carry, *_, length, stopped, out_tok, out_lp = jax.lax.while_loop(cond, body, state)
    return out_tok, out_lp, length, stopped, carry


# --- compiled programs --------------------------------------------------------------------------------------------


class Programs:
    """The jitted programs of one engine, by name, and how many traces (compilations) they have run.

    A program is defined once per engine (`define` returns the existing one for a known name), so every
    `KeptKV` over an engine shares its compiled programs, and `compile_count` stays flat across GRPO steps with
    the same buckets. Benchmarks may `wrap` a program (e.g. to record XLA's memory plan) by name.
    """

    def __init__(self) -> None:
        self._jitted: dict[str, Callable] = {}
        self._traces = 0
        self.compiling = ""  # the program whose call traced (compiles, then runs) until the call returns, or ""

    @property
    def compile_count(self) -> int:
        """Traces of the counted programs so far (a trace is a compilation for a new shape or static argument)."""
        return self._traces

    def define(self, name: str, fn: Callable, *, counted: bool = True, **jit_kwargs) -> Callable:
        """`jax.jit(fn, **jit_kwargs)` under `name` (the existing program when `name` is defined already)."""
        if name not in self._jitted:
            def traced(*args, **kwargs):
                if counted:
                    self._traces += 1  # runs once per trace, i.e. once per compilation
                self.compiling = name  # progress (issue 57 item 7): a first call of a shape compiles for minutes
                return fn(*args, **kwargs)
            jitted = jax.jit(traced, **jit_kwargs)

            def call(*args, **kwargs):
                try:
                    return jitted(*args, **kwargs)
                finally:
                    self.compiling = ""
            call.lower = jitted.lower  # what benchmarks and memory plans read of a jitted program
            self._jitted[name] = call
        return self._jitted[name]

    def __getitem__(self, name: str) -> Callable:
        """The program `name` (KeyError before it is defined)."""
        return self._jitted[name]

    def __contains__(self, name: str) -> bool:
        """Whether a program `name` is defined."""
        return name in self._jitted

    def wrap(self, name: str, wrapper: Callable[[Callable], Callable]) -> None:
        """Replace program `name` by `wrapper(program)` (engines look programs up by name at every call)."""
        self._jitted[name] = wrapper(self._jitted[name])


# --- host side: a finished row -----------------------------------------------------------------------------------


def finish(tokenizer: Any, policy_version: int, prompt_index: int, sample_index: int, prompt_len: int,
           tokens: np.ndarray, logprobs: np.ndarray, stopped: bool, sampling: SamplingParams) -> Completion:
    """A row's `Completion`. With a (Hugging Face) `tokenizer`, decode its text and apply stop strings, which trim
    tokens, log-probs and text at the token that completes the earliest stop string (finish reason "stop")."""
    text = None
    if tokenizer is not None:
        body = tokens[:-1] if stopped else tokens
        text = tokenizer.decode(body.tolist(), skip_special_tokens=True)
        cut = first_stop(text, sampling.stop_strings)
        if cut is not None:
            at, stop = cut
            n = tokens_until(tokenizer, tokens, stop)
            tokens, logprobs, stopped = tokens[:n], logprobs[:n], True
            text = text[:at + (len(stop) if sampling.include_stop_string else 0)]
    return Completion(prompt_index, sample_index, np.asarray(tokens, np.int32), np.asarray(logprobs, np.float32),
                      text, "stop" if stopped else "length", prompt_len, int(len(tokens)), policy_version)


def first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """(index, stop string) of the earliest stop string in `text`, or None."""
    found = [(text.find(s), s) for s in stops if s in text]
    return min(found) if found else None


def tokens_until(tokenizer: Any, tokens: np.ndarray, stop: str) -> int:
    """Fewest leading tokens whose decoded text contains `stop` (binary search: containment is monotone)."""
    lo, hi = 1, len(tokens)
    while lo < hi:
        mid = (lo + hi) // 2
        if stop in tokenizer.decode(tokens[:mid].tolist(), skip_special_tokens=True):
            hi = mid
        else:
            lo = mid + 1
    return lo
