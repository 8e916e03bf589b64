"""The engine's decode step on the model families (Qwen3's q/k norm, Qwen2's q/k/v bias): transformers greedy over
32 tokens, sampler log-probs equal to the trainer's, and a Qwen checkpoint's own ChatML template and end-of-turn."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from experiments import base
from swerl_jax.data.prompts import render
from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import load_hf
from swerl_jax.sampler.engine import SamplingEngine, SamplingParams
from swerl_jax.sampler.factory import load_engine
from swerl_jax.tokenizer import tokenizer_for
from tests.model.hf_models import hf_greedy, save_random_hf
from tests.sampler.test_engine import max_logprob_mismatch

PROMPTS = [[11, 12, 13, 14, 15], [300, 7, 9], [42] * 12, [5, 400, 401, 402, 403, 404, 405, 406, 407]]
NEW = 32
# Qwen's ChatML chat template (the end-of-turn token is the tokenizer's EOS, as in Qwen3's tokenizer_config.json)
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


# Untied Qwen3 (q/k norm) and tied Qwen2 (q/k/v bias); tests/model/test_families.py covers tiny-qwen3-tied's model.
@pytest.fixture(scope="module", params=["tiny-qwen3", "tiny-qwen2"])
def family(request, tmp_path_factory):
    """(config, params, HF model, engine) of a random HF checkpoint written by transformers, read with load_hf."""
    out = tmp_path_factory.mktemp(request.param)
    hf_model = save_random_hf(get_model_config(request.param), out, seed=5)
    config, params = load_hf(out)
    engine = SamplingEngine(config, params, max_batch=16, max_prompt_len=32, max_new_tokens=NEW)
    return config, params, hf_model, engine


def test_greedy_32_tokens_equal_transformers_generate(family):
    """Batched, left-padded engine greedy == transformers' generate (Qwen3ForCausalLM / Qwen2ForCausalLM) per
    prompt, 32 tokens."""
    _, _, hf_model, engine = family
    groups = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=NEW))
    for prompt, group in zip(PROMPTS, groups):
        assert group[0].tokens.tolist() == hf_greedy(hf_model, prompt, NEW)


def test_logprobs_equal_training_side_token_logprobs(family):
    """Sampler log-probs of GRPO groups (`decode_step_shared`; the greedy test above runs `decode_step`) == the
    trainer's token_logprobs on the same tokens, <= 1e-4 (fp32), as for Llama."""
    config, params, _, engine = family
    groups = engine.generate(PROMPTS, SamplingParams(temperature=0.8, max_new_tokens=NEW), num_samples=3, seed=7)
    worst = max_logprob_mismatch(config, params, PROMPTS, groups, 0.8, width=64)
    print(f"{config.family}: max |sampler - trainer| logprob {worst:.2e}")
    assert worst <= 1e-4


def _chatml_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer with Qwen's special tokens and ChatML template (built here: no hub)."""
    vocab = {chr(i): i - 32 for i in range(32, 127)} | {"\n": 95}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=" "))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"], chat_template=CHATML)


def test_a_qwen_directory_brings_its_chat_template_and_end_of_turn(tmp_path):
    """model.hf_dir = a Qwen3 directory with its tokenizer: prompts are rendered with its ChatML template and the
    engine stops at its <|im_end|> (nothing assumes Llama 3's headers)."""
    save_random_hf(get_model_config("tiny-qwen3"), tmp_path, seed=1)
    _chatml_tokenizer().save_pretrained(tmp_path)
    c = base.get_config()
    c.model.name, c.model.hf_dir = "tiny-qwen3", str(tmp_path)
    c.sampler.max_batch, c.sampler.max_new_tokens, c.data.max_prompt_len = 2, 8, 64
    tok = tokenizer_for(c.model)
    text, ids = render(tok, [{"role": "system", "content": "S"}, {"role": "user", "content": "fix it"}])
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nfix it<|im_end|>\n<|im_start|>assistant\n"
    engine, version = load_engine(c)
    assert version is None and engine.config.family == "qwen3"
    assert engine.eos_token_ids == (tok.convert_tokens_to_ids("<|im_end|>"),)
    out = engine.generate([ids.tolist()], SamplingParams(temperature=0.0, max_new_tokens=8))[0][0]
    assert out.completion_length >= 1 and out.text == tok.decode(out.tokens.tolist(), skip_special_tokens=True)
