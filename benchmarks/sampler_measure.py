"""What benchmarks/sampler_throughput.py measures with (agent_multiturn.py shares its prompts): SWE-RL-style chat
prompts of an exact token length, timed `generate` closures for our SamplingEngine and transformers, random-weight
HF checkpoints of a registered shape, the HBM roofline fraction, a long-tailed mix of completion lengths, JAX's
device peak memory, the parity of two engines' completions and the trainer -> sampler weight hand-off."""

from __future__ import annotations

import functools
import pathlib
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import torch

from swerl_jax.model.config import LlamaConfig, get_model_config
from swerl_jax.model.convert import llama_to_hf_config
from swerl_jax.sampler import weights
from swerl_jax.sampler.engine import SamplingEngine, SamplingParams

SYSTEM = ("A user will ask you to solve a task. You should first draft your thinking process (inner monologue). "
          "Then, generate the solution.")
FUNCTIONS = ["parse_header", "merge_settings", "resolve_redirect", "encode_params", "get_netrc_auth",
             "super_len", "to_key_val_list", "iter_slices"]
BUGS = ["raises KeyError when the value is empty", "returns None instead of an empty dict",
        "drops the last element", "is off by one for negative lengths", "ignores the timeout argument",
        "decodes bytes twice", "mutates its input", "loops forever on a trailing slash"]


def build_prompts(tokenizer, batch: int, prompt_tokens: int) -> list[list[int]]:
    """`batch` distinct ChatML prompts (system + a short SWE-RL-style issue and code) of exactly `prompt_tokens` ids.

    The user content is cut (in tokens) so that head + content + `<|im_end|>\\n<|im_start|>assistant\\n` has the
    requested length; every row differs (function name, bug, numbers).
    """
    head = tokenizer.encode(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n", add_special_tokens=False)
    tail = tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    room = prompt_tokens - len(head) - len(tail)
    if room < 8:
        raise ValueError(f"--prompt-tokens={prompt_tokens} leaves no room for content (template takes "
                         f"{len(head) + len(tail)} tokens)")
    prompts = []
    for i in range(batch):
        fn, bug = FUNCTIONS[i % len(FUNCTIONS)], BUGS[(i // len(FUNCTIONS)) % len(BUGS)]
        content = (f"Issue #{1000 + 37 * i}: `{fn}` {bug}.\nSteps: call `{fn}(data[{i}:], limit={i % 7 + 1})`.\n"
                   f"--- BEGIN FILE ---\n```\n### requests/utils.py\ndef {fn}(data, limit={i % 7 + 1}):\n"
                   f"    out = {{}}\n    for n, item in enumerate(data):\n        if n >= limit - {i % 3}:\n"
                   f"            break\n        out[item.key] = item.value.strip()\n    return out or None\n```\n"
                   f"--- END FILE ---\nPlease first localize the bug based on the issue statement, and then "
                   f"generate *SEARCH/REPLACE* edits to fix the issue.")
        body = tokenizer.encode(content, add_special_tokens=False)
        body = body * (room // max(len(body), 1) + 1)  # long prompts repeat the issue (cut to `room` below)
        if len(body) < room:
            raise ValueError(f"content has {len(body)} tokens, {room} needed: lower --prompt-tokens")
        prompts.append(head + body[:room] + tail)
    assert all(len(p) == prompt_tokens for p in prompts)
    return prompts


def time_call(fn: Callable[[], object]) -> tuple[float, object]:
    """(wall seconds, result) of one call."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def ours_runner(engine: SamplingEngine, prompts: Sequence[Sequence[int]], new_tokens: int, greedy: bool,
                cap: int | None = None, samples: int = 1, keep: list | None = None) -> Callable[[], None]:
    """A closure that generates exactly `new_tokens` for each of `samples` rows per prompt with our engine and
    checks the lengths.

    `cap` stops every row after `cap` tokens while keeping the program compiled for `new_tokens` (warm-up).
    The k-th call uses seed k; `keep`, if given, holds the last call's completions (for parity checks).
    """
    sp = SamplingParams(temperature=0.0 if greedy else 1.0, max_new_tokens=new_tokens, stop_token_ids=())
    caps = None if cap is None else [cap] * len(prompts)
    seed = [0]

    def run() -> None:
        seed[0] += 1
        groups = engine.generate(prompts, sp, num_samples=samples, seed=seed[0], max_new_tokens=caps)
        assert all(len(g) == samples and all(c.completion_length == (cap or new_tokens) for c in g) for g in groups)
        if keep is not None:
            keep[:] = [groups]

    return run


def torch_runner(model, prompts: Sequence[Sequence[int]], new_tokens: int, greedy: bool, pad_id: int,
                 samples: int = 1) -> Callable[[], None]:
    """A closure that calls transformers `generate` for exactly `new_tokens` per row (`num_return_sequences` =
    `samples` rows per prompt) and checks the shape."""
    ids = torch.tensor(prompts, dtype=torch.long, device=model.device)
    mask = torch.ones_like(ids)
    sampling = {} if greedy else {"temperature": 1.0, "top_k": 0, "top_p": 1.0}

    def run() -> None:
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, do_sample=not greedy, max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, pad_token_id=pad_id, num_return_sequences=samples,
                                 **sampling)
            if out.is_cuda:
                torch.cuda.synchronize()
        assert out.shape == (ids.shape[0] * samples, ids.shape[1] + new_tokens), out.shape

    return run


def random_hf_dir(name: str, out: pathlib.Path) -> pathlib.Path:
    """A Hugging Face directory with random weights (seed 0) of the registered model `name`, written by transformers."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = get_model_config(name)
    hf = {k: v for k, v in llama_to_hf_config(config).items() if k not in ("architectures", "model_type")}
    torch.manual_seed(0)  # the family's own transformers class (Llama, Qwen2, Qwen3)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(config.family, **hf)).save_pretrained(out)
    return out


def roofline_fraction(config: LlamaConfig, batch: int, prompt_tokens: int, new_tokens: int, seconds: float,
                      peak_gbps: float) -> float:
    """Fraction of `peak_gbps` needed to read the minimal bytes of every decode step in `seconds / new_tokens`.

    Minimal bytes per step: all parameters once (the tied head reads the embedding) plus the keys and values of
    the average context (prompt + half the new tokens) of every row, at the compute dtype's width.
    """
    width = np.dtype(jnp.dtype(config.dtype)).itemsize
    context = prompt_tokens + (new_tokens + 1) / 2
    kv = 2 * config.num_layers * batch * context * config.num_kv_heads * config.head_size * width
    per_step = config.num_params() * width + kv
    return per_step / (seconds / new_tokens) / (peak_gbps * 1e9)


def mix_caps(n: int, new_tokens: int, seed: int = 0) -> list[int]:
    """A long-tailed mix of completion lengths (log-normal around new_tokens / 6, clipped to [8, new_tokens])."""
    rng = np.random.default_rng(seed)
    return [int(c) for c in np.clip(np.round(np.exp(rng.normal(np.log(new_tokens / 6), 1.0, n))), 8, new_tokens)]


def device_peak_mib() -> float | None:
    """JAX's process-wide peak device memory so far (`memory_stats()['peak_bytes_in_use']`; None where the
    backend keeps no such count, e.g. CPU). It is monotone and cannot be reset."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats["peak_bytes_in_use"] / 2**20 if "peak_bytes_in_use" in stats else None


def parity(a: list, b: list) -> tuple[int, int, float]:
    """(rows with identical tokens, rows, max |log-prob difference| over the positions before each row's first
    differing token) between two engines' completions of the same prompts and seed."""
    same, total, worst = 0, 0, 0.0
    for ga, gb in zip(a, b):
        for x, y in zip(ga, gb):
            total += 1
            diff = np.flatnonzero(x.tokens != y.tokens)
            same += diff.size == 0
            n = diff[0] if diff.size else x.tokens.size
            if n:
                worst = max(worst, float(np.abs(x.logprobs[:n] - y.logprobs[:n]).max()))
    return same, total, worst


def measure_weight_sync(params: dict, versions: int) -> dict[str, float]:
    """Publish `versions` successive policy versions to a temporary directory, each followed by a watcher poll.

    Returns medians: publish seconds (the trainer's blocking save + marker), marker -> ready seconds
    (`WeightWatcher.last_ready_latency_s`) and the poll's own wall time, plus the params' size in MiB.
    """
    pub, ready, poll = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        watcher = weights.WeightWatcher(tmp, like=params)
        for v in range(1, versions + 1):
            t_pub, _ = time_call(functools.partial(weights.publish, tmp, params, v, keep_last=2))
            t_poll, got = time_call(watcher.poll)
            assert got is not None and got[0] == v
            pub.append(t_pub)
            poll.append(t_poll)
            ready.append(watcher.last_ready_latency_s)
        sample = jax.tree.leaves(got[1])[0]
        assert np.array_equal(np.asarray(sample), np.asarray(jax.tree.leaves(params)[0]))
    return {"publish_s": statistics.median(pub), "ready_latency_s": statistics.median(ready),
            "poll_s": statistics.median(poll), "mib": weights.tree_nbytes(params) / 2**20}
