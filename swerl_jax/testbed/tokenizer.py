"""The testbed's tokenizer: a byte-level BPE trained on the testbed's own text, so a tiny policy's head is small.

    python -m swerl_jax.testbed.tokenizer --out swerl_jax/testbed/tokenizer_2k      # rebuilds the shipped one
    model.tokenizer = "testbed"                                                      # an experiment uses it

Why: with SmolLM2's 49,152-token vocabulary, the ~7M-parameter demo policy is 90% embedding, and the vocabulary
projection is ~85% of every step's FLOPs (demo-7m: 6·128·49152 = 38 MFLOP a token against ~7 for its 4 layers).
Trained on the training tasks' text (the compact prompt in the chat template, the oracle answer, the end of turn),
2,048 tokens encode held-out tasks in *fewer* tokens than SmolLM2's (measured in ABLATIONS.md "The CPU
testbed"), so the same compute buys a 24x smaller head and a wider, deeper decoder. It is byte-level (every byte
is a token), so any text, a policy's answer included, round-trips exactly: nothing is ever unknown.

The shipped folder is what `build` writes for its defaults (training seed 0, 2,000 tasks, at most 1 distractor
module); `build.json` records the arguments and the `tokenizers` version. The chat template and the special
tokens are SmolLM2-Instruct's (ChatML), so prompts are the same text under either tokenizer. Held-out tasks
(seed + HELDOUT_OFFSET) are never read.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Iterator

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from swerl_jax.data.prompts import build_prompt
from swerl_jax.data.targets import oracle_solution
from swerl_jax.testbed.tasks import generate_tasks
from swerl_jax.tokenizer import TESTBED_TOKENIZER_DIR, load_tokenizer

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 (SmolLM2's are 0, 1, 2 too)
DEFAULTS = {"vocab_size": 2048, "num_tasks": 2000, "seed": 0, "max_distractors": 1}


def corpus(num_tasks: int, seed: int, max_distractors: int) -> Iterator[str]:
    """The text a policy reads and writes on `num_tasks` training tasks: the compact prompt in the chat template
    (with the generation prompt), the oracle answer and the end of turn (uncut: no token budget applies)."""
    chat = load_tokenizer("")  # SmolLM2's: only its chat template renders the text here
    for record in generate_tasks(num_tasks, seed, max_distractors=max_distractors):
        prompt = build_prompt(record, chat, 1 << 20, "compact")
        yield chat.decode(prompt.ids) + oracle_solution(record) + SPECIAL_TOKENS[2]


def train_tokenizer(texts: Iterator[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE of at most `vocab_size` tokens trained on `texts`, with ChatML's special tokens and
    SmolLM2-Instruct's chat template (end of turn `<|im_end|>` is its eos and pad token)."""
    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    model.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=model, bos_token=SPECIAL_TOKENS[1], eos_token=SPECIAL_TOKENS[2],
                                  pad_token=SPECIAL_TOKENS[2], unk_token=SPECIAL_TOKENS[0])
    tok.chat_template = load_tokenizer("").chat_template
    return tok


def build(out: str | pathlib.Path, vocab_size: int = DEFAULTS["vocab_size"], num_tasks: int = DEFAULTS["num_tasks"],
          seed: int = DEFAULTS["seed"], max_distractors: int = DEFAULTS["max_distractors"]) -> PreTrainedTokenizerFast:
    """Train the tokenizer on the training tasks and save it (with `build.json`) into `out`; returns it."""
    tok = train_tokenizer(corpus(num_tasks, seed, max_distractors), vocab_size)
    out = pathlib.Path(out)
    tok.save_pretrained(out)
    meta = {"vocab_size": vocab_size, "num_tasks": num_tasks, "seed": seed, "max_distractors": max_distractors,
            "size": len(tok), "tokenizers": tokenizers.__version__,
            "command": f"python -m swerl_jax.testbed.tokenizer --vocab-size {vocab_size} --num-tasks {num_tasks} "
                       f"--seed {seed} --max-distractors {max_distractors}"}
    (out / "build.json").write_text(json.dumps(meta, indent=1) + "\n")
    return tok


def main(argv: list[str] | None = None) -> int:
    """CLI: build the testbed tokenizer (the defaults rebuild the shipped `model.tokenizer="testbed"`)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(TESTBED_TOKENIZER_DIR))
    p.add_argument("--vocab-size", type=int, default=DEFAULTS["vocab_size"])
    p.add_argument("--num-tasks", type=int, default=DEFAULTS["num_tasks"])
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--max-distractors", type=int, default=DEFAULTS["max_distractors"])
    a = p.parse_args(argv)
    tok = build(a.out, a.vocab_size, a.num_tasks, a.seed, a.max_distractors)
    print(f"wrote {a.out}: {len(tok)} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
