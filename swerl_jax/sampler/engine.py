"""The static generation engine: one jitted prefill + decode loop over a preallocated KV cache.

Shapes are padded up to fixed buckets (prompt batch, sample batch, prompt length, new tokens), so a GRPO run
compiles a handful of programs once and never again; `compile_count` says how many. Prompts are left padded,
each prompt is prefilled once (`core.prefill`) and, with several samples per prompt, its K/V is kept once for its
group (`shared_prefix`; otherwise copied to its N sample rows), and the whole decode loop (`core.decode_loop`) is
a `jax.lax.while_loop` inside the same jit (no host round trip per token; it exits when every row has stopped).

Log-probabilities: for every sampled token the engine returns the log-prob of the distribution it was drawn
from: `log softmax(logits / T)[token]` without top-k / top-p (exactly what the trainer recomputes with
`token_logprobs(..., temperature=T)`, so the GRPO ratio starts at 1 when the weights agree), and under top-k /
top-p that of the renormalised truncated distribution (the true behaviour probability of an importance weight;
`sampling.sample_tokens`). Greedy rows (temperature 0) report `log softmax(logits)[token]` (T = 1).

Randomness is per row: row r (prompt i, sample j) draws from `fold_in(fold_in(fold_in(PRNGKey(seed), i), j),
step)`, so a row's samples do not depend on which other prompts share its batch or on bucket padding.

The engine's public surface for the engines built on it (`continuous`, `sessions`): its limits and buckets,
`params` / `policy_version`, `tokenizer`, `eos_token_ids`, `pad_token_id` and `programs` (a `core.Programs`,
where they define their own programs so that `compile_count` counts them too).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.llama import KVCache
from swerl_jax.sampler.core import (
    Programs,
    RowParams,
    bucket,
    decode_loop,
    default_buckets,
    finish,
    left_pad,
    prefill,
    row_key,
    row_params,
    stop_ids,
    uses_filters,
)
from swerl_jax.sampler.decode import (
    decode_step,
    decode_step_shared,
    decode_weights,
    fill_cache,
    shared_prefix_cache,
    zeros_cache,
)
from swerl_jax.sampler.types import Completion, RequestTooLarge, SamplingParams

__all__ = ["Completion", "RequestTooLarge", "SamplingEngine", "SamplingParams", "default_buckets"]


def _generate(config: LlamaConfig, params: dict, cache: tuple[KVCache, ...], prompt_tokens: jax.Array,
              prompt_mask: jax.Array, row_src: jax.Array, rows: RowParams, stop: jax.Array, *, num_new: int,
              use_filters: bool):
    """Prefill the unique prompts, copy their cache rows to the sample rows, decode up to `num_new` tokens."""
    n_rows, slots = cache[0].v.shape[0], cache[0].v.shape[2]
    t_prompt = prompt_tokens.shape[1]
    logits, pre_cache = prefill(config, params, prompt_tokens, prompt_mask)
    cache = fill_cache(cache, pre_cache, row_src)  # prompt rows -> sample rows
    weights = decode_weights(config, params)
    kv_mask = jnp.zeros((n_rows, slots), bool).at[:, :t_prompt].set(prompt_mask[row_src])

    def step_fn(tok, position, step, cache, kv_mask):
        slot = t_prompt + step
        kv_mask = jax.lax.dynamic_update_slice_in_dim(kv_mask, jnp.ones((n_rows, 1), bool), slot, axis=1)
        logits, cache = decode_step(config, weights, tok, position, kv_mask, cache, slot)
        return logits, (cache, kv_mask)

    out_tok, out_lp, length, stopped, (cache, _) = decode_loop(
        step_fn, (cache, kv_mask), logits[row_src], jnp.sum(prompt_mask, axis=-1, dtype=jnp.int32)[row_src], rows,
        stop, num_new, use_filters)
    return out_tok, out_lp, length, stopped, cache


def _generate_shared(config: LlamaConfig, params: dict, prompt_tokens: jax.Array, prompt_mask: jax.Array,
                     rows: RowParams, stop: jax.Array, *, num_new: int, samples: int, use_filters: bool,
                     prefix_kernel: str = "xla"):
    """`_generate` for GRPO groups: rows = prompts x `samples`, the prompts' K/V kept once per prompt
    (`decode.shared_prefix_cache`) instead of copied to every row; `prefix_kernel` is `decode_step_shared`'s
    attention kernel ("xla" or "pallas")."""
    n_prompts = prompt_tokens.shape[0]
    row_src = jnp.repeat(jnp.arange(n_prompts), samples)
    logits, pre_cache = prefill(config, params, prompt_tokens, prompt_mask)
    cache = shared_prefix_cache(config, pre_cache, n_prompts * samples, num_new)
    weights = decode_weights(config, params)

    def step_fn(tok, position, step, cache, _):
        logits, cache = decode_step_shared(config, weights, tok, position, prompt_mask, cache, step,
                                           kernel=prefix_kernel)
        return logits, (cache, None)

    out_tok, out_lp, length, stopped, _ = decode_loop(
        step_fn, (cache, None), logits[row_src], jnp.sum(prompt_mask, axis=-1, dtype=jnp.int32)[row_src], rows,
        stop, num_new, use_filters)
    return out_tok, out_lp, length, stopped


def check_prompt_offset(prompt_offset: int) -> None:
    """A request's `prompt_offset` must be an int >= 0."""
    if isinstance(prompt_offset, bool) or not isinstance(prompt_offset, (int, np.integer)) or prompt_offset < 0:
        raise ValueError(f"prompt_offset must be an int >= 0, got {prompt_offset!r}")


class SamplingEngine:
    """Batched sampling from a Llama policy; holds the params, the compiled programs and the KV cache."""

    def __init__(self, config: LlamaConfig, params: dict, *, tokenizer=None, max_batch: int = 64,
                 max_prompt_len: int = 1024, max_new_tokens: int = 256, eos_token_ids: Sequence[int] = (),
                 batch_buckets: Sequence[int] | None = None, prompt_buckets: Sequence[int] | None = None,
                 new_token_buckets: Sequence[int] | None = None, policy_version: int = 0,
                 pad_token_id: int = 0, shared_prefix: bool = True, prefix_kernel: str = "auto") -> None:
        """Args:
          config, params: the policy.
          tokenizer: optional Hugging Face tokenizer for `text` and stop strings.
          max_batch: most sequences (prompts x samples) decoded together; larger requests run in chunks.
          max_prompt_len, max_new_tokens: request limits; the KV cache holds their sum.
          eos_token_ids: default stop tokens (tokenizer.eos_token_id is added when a tokenizer is given).
          *_buckets: padded sizes (sorted); default powers of two up to the limits.
          shared_prefix: with several samples per prompt, keep each prompt's K/V once and attend over it once
            per group (`decode.decode_step_shared`) instead of copying it to every sample's row.
          prefix_kernel: the shared-prefix attention: "xla", "pallas" (the fused Pallas/Triton kernels of
            `prefix_attention`; interpret mode, slow, off GPU) or "auto" ("pallas" on a GPU, else "xla").
        """
        if prefix_kernel not in ("auto", "xla", "pallas"):
            raise ValueError(f"SamplingEngine(prefix_kernel={prefix_kernel!r}): must be one of 'auto', 'xla', 'pallas'")
        if prefix_kernel == "auto":
            prefix_kernel = "pallas" if jax.default_backend() == "gpu" else "xla"
        for name, value in (("max_batch", max_batch), ("max_prompt_len", max_prompt_len),
                            ("max_new_tokens", max_new_tokens)):
            if value < 1:
                raise ValueError(f"sampler.{name} must be >= 1, got {value}")
        self.config = config
        self.tokenizer = tokenizer
        self.max_batch, self.max_prompt_len, self.max_new_tokens = max_batch, max_prompt_len, max_new_tokens
        eos = list(eos_token_ids)
        if tokenizer is not None and tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
            eos.append(tokenizer.eos_token_id)
        self.eos_token_ids = tuple(eos)
        self.batch_buckets = tuple(sorted(batch_buckets or default_buckets(max_batch, 1)))
        self.prompt_buckets = tuple(sorted(prompt_buckets or default_buckets(max_prompt_len, 16)))
        self.new_token_buckets = tuple(sorted(new_token_buckets or default_buckets(max_new_tokens, 16)))
        self.pad_token_id = pad_token_id
        self.params = params
        self.policy_version = policy_version
        self._cache: tuple[KVCache, ...] | None = None
        self.shared_prefix = shared_prefix
        self.prefix_kernel = prefix_kernel  # resolved: "xla" or "pallas" (static in the shared program)
        self.programs = Programs()  # every program of this engine and of those built on it (`compile_count`)
        self._done = (0, 0, 0)  # the request in flight: (prompts, prompts done, tokens generated); `activity`
        # the cache (argument 1) is donated: the call returns it and the next call of the same shape reuses it
        self.programs.define("generate", functools.partial(_generate, config),
                             static_argnames=("num_new", "use_filters"), donate_argnums=(1,))
        self.programs.define("generate_shared", functools.partial(_generate_shared, config,
                                                                  prefix_kernel=prefix_kernel),
                             static_argnames=("num_new", "samples", "use_filters"))

    @property
    def compile_count(self) -> int:
        """How many programs have been compiled (traced) so far; stable across steps with the same buckets."""
        return self.programs.compile_count

    def activity(self) -> dict:
        """The request in flight, as far as the host sees it (decoding runs inside one XLA loop per chunk of
        `max_batch` rows): prompts asked and done, tokens generated so far, and the program being compiled (a first
        call of a shape; "" when none). Read from another thread (the sampler server's ping; progress bars)."""
        prompts, done, tokens = self._done
        return {"prompts": prompts, "prompts_done": done, "tokens": tokens, "compiling": self.programs.compiling}

    def update_params(self, params: dict, version: int) -> None:
        """Swap in a new policy (same shapes: nothing recompiles)."""
        self.params = params
        self.policy_version = version

    def _cache_for(self, rows: int, slots: int) -> tuple[KVCache, ...]:
        c = self._cache
        if c is not None and c[0].v.shape[0] == rows and c[0].v.shape[2] == slots:
            self._cache = None  # donated to the call; the call returns it
            return c
        self._cache = None  # free the old buffers before allocating new ones
        return zeros_cache(self.config, rows, slots)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams = SamplingParams(),
                 num_samples: int = 1, seed: int = 0, max_new_tokens: Sequence[int] | None = None, *,
                 prompt_offset: int = 0) -> list[list[Completion]]:
        """Sample `num_samples` completions for each prompt (token ids).

        `max_new_tokens` optionally caps each prompt's completions (default: sampling.max_new_tokens).
        `prompt_offset`: prompt i is prompt `prompt_offset + i` of a larger request, for its PRNG keys and its
        Completions' `prompt_index`, so that a request split in parts (`fleet.SamplerFleet`) samples what the
        whole request would.
        Returns one list of `num_samples` Completions per prompt, in order.
        """
        sampling.validate()
        check_prompt_offset(prompt_offset)
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if num_samples > self.max_batch:
            raise RequestTooLarge(f"num_samples={num_samples} exceeds sampler.max_batch={self.max_batch}")
        if sampling.max_new_tokens > self.max_new_tokens:
            raise RequestTooLarge(f"sampling.max_new_tokens={sampling.max_new_tokens} exceeds the cache's "
                                  f"sampler.max_new_tokens={self.max_new_tokens}")
        prompts = [np.asarray(p, np.int32).reshape(-1) for p in prompts]
        caps = [sampling.max_new_tokens] * len(prompts) if max_new_tokens is None else list(max_new_tokens)
        if len(caps) != len(prompts):
            raise ValueError(f"max_new_tokens has {len(caps)} entries for {len(prompts)} prompts")
        for i, (p, cap) in enumerate(zip(prompts, caps)):
            if p.size == 0:
                raise ValueError(f"prompt {i} is empty")
            if p.size > self.max_prompt_len:
                raise RequestTooLarge(f"prompt {i} has {p.size} tokens; sampler.max_prompt_len is "
                                      f"{self.max_prompt_len}")
            if not 1 <= cap <= self.max_new_tokens:
                raise RequestTooLarge(f"max_new_tokens[{i}]={cap} is not in [1, {self.max_new_tokens}]")
            if p.min() < 0 or p.max() >= self.config.vocab_size:
                raise ValueError(f"prompt {i} has token ids outside [0, {self.config.vocab_size})")
        per_chunk = self.max_batch // num_samples
        out: list[list[Completion]] = []
        tokens = 0
        self._done = (len(prompts), 0, 0)
        for start in range(0, len(prompts), per_chunk):
            idx = range(start, min(start + per_chunk, len(prompts)))
            out.extend(self._run_chunk([prompts[i] for i in idx], [caps[i] for i in idx],
                                       [prompt_offset + i for i in idx], sampling, num_samples, seed))
            tokens += sum(len(c.tokens) for group in out[start:] for c in group)
            self._done = (len(prompts), len(out), tokens)
        return out

    def _run_chunk(self, prompts: list[np.ndarray], caps: list[int], indices: list[int], sampling: SamplingParams,
                   num_samples: int, seed: int) -> list[list[Completion]]:
        n_prompts = bucket(len(prompts), self.batch_buckets, "prompts per batch")
        shared = self.shared_prefix and num_samples > 1
        rows = n_prompts * num_samples if shared else bucket(len(prompts) * num_samples, self.batch_buckets,
                                                              "sequences per batch")
        t_prompt = bucket(max(p.size for p in prompts), self.prompt_buckets, "prompt length")
        num_new = bucket(max(caps), self.new_token_buckets, "max_new_tokens")
        tokens, mask = left_pad(prompts, n_prompts, t_prompt, self.pad_token_id)
        real = len(prompts) * num_samples
        row_src = np.zeros(rows, np.int32)
        row_src[:real] = np.repeat(np.arange(len(prompts)), num_samples)
        max_new = np.zeros(rows, np.int32)  # 0: a padding row, done before it starts
        max_new[:real] = np.repeat(np.asarray(caps, np.int32), num_samples)
        base = jax.random.PRNGKey(seed)
        keys = [row_key(base, indices[r // num_samples], r % num_samples) for r in range(real)]
        per_row = row_params(sampling, keys + [base] * (rows - real), max_new)
        stop, use_filters = stop_ids(sampling, self.eos_token_ids), uses_filters(sampling)
        if shared:
            out_tok, out_lp, length, stopped = self.programs["generate_shared"](
                self.params, tokens, mask, per_row, stop, num_new=num_new, samples=num_samples,
                use_filters=use_filters)
        else:
            out_tok, out_lp, length, stopped, cache = self.programs["generate"](
                self.params, self._cache_for(rows, t_prompt + num_new), tokens, mask, row_src, per_row, stop,
                num_new=num_new, use_filters=use_filters)
            self._cache = cache
        out_tok, out_lp, length, stopped = jax.device_get((out_tok, out_lp, length, stopped))
        result = []
        for i, p in enumerate(prompts):
            group = []
            for j in range(num_samples):
                r = i * num_samples + j
                n = int(length[r])
                group.append(finish(self.tokenizer, self.policy_version, indices[i], j, p.size, out_tok[r, :n],
                                    out_lp[r, :n], bool(stopped[r]), sampling))
            result.append(group)
        return result
