"""The real SmolLM2-135M-Instruct: GGUF -> HF conversion (cached), registry consistency, parity with transformers."""

import json

import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import hf_config_to_llama
from tests.conftest import requires_smollm2

pytestmark = requires_smollm2


@pytest.fixture(scope="module")
def smollm2_dir():
    from swerl_jax.model.smollm2 import smollm2_hf_dir

    return smollm2_hf_dir()  # converts once into the cache folder (~1 min), then returns at once


def test_converted_config_matches_registry(smollm2_dir):
    hf = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in hf  # plain fp32 weights now
    got = hf_config_to_llama(hf)
    want = get_model_config("smollm2-135m")
    # The GGUF stores eps as float32 (9.9999997e-06); everything else is exact.
    assert got.rms_norm_eps == pytest.approx(want.rms_norm_eps, rel=1e-6)
    assert got.replace(rms_norm_eps=want.rms_norm_eps) == want
    assert (got.rope_theta, got.tie_word_embeddings, got.num_layers) == (100000.0, True, 30)


def test_tokenizer_has_chatml_template(smollm2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nhi<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")


@pytest.mark.slow
def test_logit_parity_with_transformers(smollm2_dir):
    """The forward pass on the real weights. Greedy decoding parity (batched, left-padded, 24 tokens, stop at
    <|im_end|>) is tests/sampler/test_smollm2.py's; here only 4 greedy tokens extend the scored positions."""
    from swerl_jax.model.check_logits import check_logits

    result = check_logits(smollm2_dir, "Fix the off-by-one error in `range(1, len(xs))`.", new_tokens=4, chat=True)
    print(result.summary())
    # Measured 1.1e-4 here (fp32, 30 layers, logits of magnitude ~20): just above the 1e-4 that check_logits'
    # --tol default and the tiny-model tests use, so 1e-4 would fail on this model; 2e-4 is that measurement with
    # a margin for BLAS summation order (the old 1e-3 let a 9x regression through).
    assert result.max_abs_logit_diff <= 2e-4, result.summary()
    assert result.greedy_match == 4, (result.hf_continuation, result.jax_continuation)
    assert result.position_argmax_match.all()
