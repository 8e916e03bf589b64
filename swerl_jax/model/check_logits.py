"""Parity check of swerl_jax against Hugging Face `transformers` on a checkpoint directory.

    python -m swerl_jax.model.check_logits --hf DIR [--prompt TEXT] [--tol 2e-4] [--new-tokens 32] [--chat]

Both load DIR, a Llama, Qwen2/Qwen2.5 or Qwen3 checkpoint (transformers: the family's own class, torch, CPU,
fp32; swerl_jax: `load_hf`, fp32), decode `--new-tokens` greedily from the prompt (each with its own KV cache),
then score prompt + transformers' continuation with a full forward in both and compare logits position by
position. The LAST printed line is
`max_abs_logit_diff=<float> greedy_match=<n>/<n>` (greedy_match: length of the common prefix of the two
greedy continuations); the exit status is 1 when the diff is above `--tol`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.model.config import LlamaConfig
from swerl_jax.model.convert import load_hf
from swerl_jax.model.llama import KVCache, Llama, forward

DEFAULT_PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"


@dataclasses.dataclass
class ParityResult:
    """Outcome of one parity check."""

    prompt_tokens: list[int]
    hf_continuation: list[int]
    jax_continuation: list[int]
    position_diff: np.ndarray  # [positions] max |logit diff| per scored position
    position_argmax_match: np.ndarray  # [positions] bool
    max_abs_logit_diff: float

    @property
    def greedy_match(self) -> int:
        """Length of the common prefix of the two greedy continuations."""
        n = 0
        for a, b in zip(self.hf_continuation, self.jax_continuation, strict=True):
            if a != b:
                break
            n += 1
        return n

    def summary(self) -> str:
        """The machine-readable last line."""
        return (f"max_abs_logit_diff={self.max_abs_logit_diff:.3e} "
                f"greedy_match={self.greedy_match}/{len(self.hf_continuation)}")


@functools.partial(jax.jit, static_argnums=0)
def _decode_step(config: LlamaConfig, params: dict, tokens: jax.Array, positions: jax.Array, kv_mask: jax.Array,
                 cache: KVCache, index: jax.Array) -> tuple[jax.Array, KVCache]:
    logits, cache = Llama(config).apply({"params": params}, tokens, positions, kv_mask, cache, index)
    return jnp.argmax(logits[:, -1], axis=-1), cache


def greedy_generate(config: LlamaConfig, params: dict, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy continuation of one prompt with a KV cache: one prefill, then one token per step (no stop token).

    A small reference loop for parity checks; the production sampler is `swerl_jax.sampler.engine`.
    """
    t = len(prompt)
    total = t + new_tokens
    cache = KVCache.zeros(config, 1, total)
    kv_mask = jnp.zeros((1, total), bool).at[:, :t].set(True)
    nxt, cache = _decode_step(config, params, jnp.asarray([prompt], jnp.int32),
                              jnp.arange(t, dtype=jnp.int32)[None], kv_mask, cache, jnp.int32(0))
    out = [int(nxt[0])]
    for i in range(t, total - 1):
        kv_mask = kv_mask.at[:, i].set(True)
        nxt, cache = _decode_step(config, params, nxt[:, None].astype(jnp.int32), jnp.full((1, 1), i, jnp.int32),
                                  kv_mask, cache, jnp.int32(i))
        out.append(int(nxt[0]))
    return out


def hf_greedy_generate(model, prompt: list[int], new_tokens: int) -> list[int]:
    """transformers' greedy continuation (its own KV cache), exactly `new_tokens` long (EOS does not stop it)."""
    import torch

    out: list[int] = []
    ids = torch.tensor([prompt])
    past = None
    with torch.no_grad():
        for _ in range(new_tokens):
            res = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = res.past_key_values
            nxt = int(res.logits[0, -1].argmax())
            out.append(nxt)
            ids = torch.tensor([[nxt]])
    return out


def encode_prompt(hf_dir: pathlib.Path, prompt: str, chat: bool, vocab_size: int) -> list[int]:
    """Token ids of `prompt` with DIR's tokenizer (chat template if `chat`); UTF-8 bytes when DIR has none."""
    if not any((hf_dir / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return [b % vocab_size for b in prompt.encode()]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    if chat:
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        return list(ids)
    return tok(prompt)["input_ids"]


def check_logits(hf_dir: str | pathlib.Path, prompt: str = DEFAULT_PROMPT, new_tokens: int = 32,
                 chat: bool = False, prompt_ids: list[int] | None = None) -> ParityResult:
    """Run the same tokens through transformers and swerl_jax (both fp32) and compare logits and greedy output.

    `prompt_ids`, when given, are used as the prompt instead of encoding `prompt`.
    """
    import torch
    from transformers import AutoModelForCausalLM

    hf_dir = pathlib.Path(hf_dir)
    config, params = load_hf(hf_dir, "float32")
    # transformers' own class for the family (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)
    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    if prompt_ids is None:
        prompt_ids = encode_prompt(hf_dir, prompt, chat, config.vocab_size)
    prompt_ids = [int(t) for t in prompt_ids]
    if not prompt_ids:
        raise ValueError("--prompt encodes to no tokens")
    hf_cont = hf_greedy_generate(model, prompt_ids, new_tokens)
    jax_cont = greedy_generate(config, params, prompt_ids, new_tokens)
    seq = prompt_ids + hf_cont
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([seq])).logits[0].numpy()
    ours = np.asarray(jax.jit(forward, static_argnums=0)(config, params, jnp.asarray([seq], jnp.int32)))[0]
    diff = np.abs(ours - ref).max(axis=-1)
    return ParityResult(prompt_ids, hf_cont, jax_cont, diff, ours.argmax(-1) == ref.argmax(-1), float(diff.max()))


def print_report(result: ParityResult, tokenizer=None, out=None) -> None:
    """Per-position agreement table, then the summary as the last line (to `out`, default stdout)."""
    out = out or sys.stdout
    seq = result.prompt_tokens + result.hf_continuation
    print(f"{'pos':>5} {'token':>7} {'max|diff|':>10} argmax", file=out)
    for i, (tok, d, same) in enumerate(zip(seq, result.position_diff, result.position_argmax_match, strict=True)):
        text = repr(tokenizer.decode([tok]))[:24] if tokenizer is not None else ""
        print(f"{i:>5} {tok:>7} {d:>10.2e} {'same' if same else 'DIFF'}  {text}", file=out)
    print(f"prompt {len(result.prompt_tokens)} tokens + {len(result.hf_continuation)} greedy tokens; "
          f"argmax agrees at {int(result.position_argmax_match.sum())}/{len(seq)} positions", file=out)
    print(result.summary(), file=out)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf", required=True,
                    help="Hugging Face Llama, Qwen2 or Qwen3 directory (config.json + safetensors)")
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("--tol", type=float, default=2e-4,
                    help="max allowed |logit diff| (fp32; SmolLM2-135M measures 1.1e-4 over 30 layers)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    args = ap.parse_args(argv)
    hf_dir = pathlib.Path(args.hf)
    result = check_logits(hf_dir, args.prompt, args.new_tokens, args.chat)
    tokenizer = None
    if (hf_dir / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(hf_dir))
    print_report(result, tokenizer)
    return 1 if result.max_abs_logit_diff > args.tol else 0


if __name__ == "__main__":
    sys.exit(main())
