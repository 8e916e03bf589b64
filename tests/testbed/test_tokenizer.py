"""The testbed's tokenizer (`model.tokenizer="testbed"`): the shipped folder fits the testbed models, encodes any
text losslessly (byte-level), speaks ChatML like SmolLM2's, and `build` is deterministic."""

from __future__ import annotations

import json

from swerl_jax.data.prompts import build_prompt
from swerl_jax.data.targets import oracle_solution
from swerl_jax.model.config import MODEL_CONFIGS
from swerl_jax.testbed.tasks import HELDOUT_OFFSET, generate_tasks
from swerl_jax.testbed.tokenizer import SPECIAL_TOKENS, corpus, train_tokenizer
from swerl_jax.tokenizer import TESTBED_TOKENIZER_DIR, load_tokenizer


def test_shipped_tokenizer_fits_the_testbed_models_and_speaks_chatml():
    tok = load_tokenizer("testbed")
    meta = json.loads((TESTBED_TOKENIZER_DIR / "build.json").read_text())
    assert len(tok) == meta["size"] == 2048
    assert all(MODEL_CONFIGS[n].vocab_size == len(tok) for n in ("testbed-128x4", "testbed-256x6"))
    assert [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2]
    assert tok.eos_token == "<|im_end|>" and tok.chat_template == load_tokenizer("").chat_template


def test_heldout_prompts_and_any_text_round_trip():
    tok, smol = load_tokenizer("testbed"), load_tokenizer("")
    ours = theirs = 0
    for record in generate_tasks(40, HELDOUT_OFFSET, max_distractors=2):  # never in the tokenizer's corpus
        prompt = build_prompt(record, tok, 4096, "compact")
        text = tok.decode(prompt.ids) + oracle_solution(record)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text and max(ids) < len(tok)
        ours, theirs = ours + len(ids), theirs + len(smol(text, add_special_tokens=False)["input_ids"])
    assert ours < theirs  # shorter than SmolLM2's 49k vocabulary on the testbed's own text
    weird = "naïve café ☃ \x00\t\r\n  日本語 <<<<<<< SEARCH\n=======\n>>>>>>> REPLACE 🤖"
    assert tok.decode(tok(weird, add_special_tokens=False)["input_ids"]) == weird  # nothing is unknown


def test_build_is_deterministic():
    a = train_tokenizer(corpus(30, 0, 1), 400)
    b = train_tokenizer(corpus(30, 0, 1), 400)
    assert a.get_vocab() == b.get_vocab() and len(a) == 400
