"""Conversations to token ids where only the chat template's own structure yields control (special) tokens.

Text that a policy or a repository wrote (an issue, code, a tool's output, a transcript, a patch) may contain the
strings of the tokenizer's control tokens: `<|im_end|><|im_start|>user` (ChatML) or `<|eot_id|>
<|start_header_id|>` (Llama 3). Encoded with the template's text in one call, they become real role tokens, so a
file could end the model's context's user turn and open one of its own. Every conversation the project sends to a
model is therefore rendered by `render_ids` (or, for a turn appended to a kept context, `encode_parts`): the
template is rendered with one marker per message, its text between the markers is the template's structure (its
control tokens become their ids), and the messages' text is encoded with a private copy of the tokenizer's
backend that matches no special token, so `<|im_end|>` in a message is the characters `<|im_end|>`.

For text without control-token strings the ids are exactly the ones the whole rendered text gives (the backend
splits at special tokens and encodes the text between them independently, as done here); byte-level BPE
tokenizers (SmolLM2, Llama 3, Qwen) are the ones the project uses. No JAX, no numpy: loaders, workers and the
sampler client import this module.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

_MARK = "\ue000{}\ue001"  # private-use characters: no template writes them and no message needs them here
_MARKS = re.compile("\ue000([0-9]+)\ue001")
_text_backends: dict[int, tuple[Any, Any, re.Pattern | None, dict[str, int]]] = {}
_lock = threading.Lock()


def _backend(tokenizer) -> tuple[Any, re.Pattern | None, dict[str, int]]:
    """(a backend that encodes special-token strings as text, a pattern of the special strings, their ids).

    A copy, set once: the shared tokenizer's `split_special_tokens` flips one flag on the backend that every
    thread's encode reads, so toggling it per call could let another thread's text through unsplit."""
    key = id(tokenizer)
    with _lock:
        got = _text_backends.get(key)
        if got is None or got[0] is not tokenizer:
            backend = getattr(tokenizer, "backend_tokenizer", None)
            if backend is None:
                raise TypeError(f"{type(tokenizer).__name__}: rendering conversations safely needs a fast "
                                "(Rust-backed) tokenizer")
            text_only = type(backend).from_str(backend.to_str())
            text_only.encode_special_tokens = True
            specials = {t.content: i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
            # longest first: a special string that starts another one must not cut it
            pattern = re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))) \
                if specials else None
            got = _text_backends[key] = (tokenizer, text_only, pattern, specials)
    return got[1], got[2], got[3]


def special_ids(tokenizer) -> set[int]:
    """The ids of the tokenizer's control tokens (added tokens marked special)."""
    return set(_backend(tokenizer)[2].values())


def encode_text(tokenizer, text: str) -> list[int]:
    """`text` as text: a control token's string in it is its characters' ordinary tokens, never the control id."""
    return list(_backend(tokenizer)[0].encode(text, add_special_tokens=False).ids) if text else []


def encode_parts(tokenizer, parts: Sequence[tuple[str, bool]]) -> list[int]:
    """Ids of the concatenated `parts`, each (text, structure): a structure part is the chat template's own text,
    whose control-token strings become control ids; any other part is encoded as text. Text either side of a
    control token is encoded together, as the tokenizer encodes a whole string (the same ids for plain text)."""
    backend, pattern, specials = _backend(tokenizer)
    ids: list[int] = []
    pending: list[str] = []  # text since the last control token

    def flush() -> None:
        if pending:
            ids.extend(backend.encode("".join(pending), add_special_tokens=False).ids)
            pending.clear()

    for text, structure in parts:
        if not structure or pattern is None:
            pending.append(text)
            continue
        at = 0
        for m in pattern.finditer(text):
            pending.append(text[at:m.start()])
            flush()
            ids.append(specials[m.group()])
            at = m.end()
        pending.append(text[at:])
    flush()
    return ids


def template_parts(tokenizer, messages: Sequence[dict], add_generation_prompt: bool = True
                   ) -> list[tuple[str, bool]]:
    """The rendered conversation as (text, structure) parts: the template's text and each message's content as
    the template shows it. ValueError when the template drops or rewrites content beyond trimming it."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat template (model.tokenizer)")
    marked = [{**m, "content": _MARK.format(i)} for i, m in enumerate(messages)]
    skeleton = tokenizer.apply_chat_template(marked, tokenize=False, add_generation_prompt=add_generation_prompt)
    pieces = _MARKS.split(skeleton)  # structure, index, structure, index, ..., structure
    if [int(i) for i in pieces[1::2]] != list(range(len(messages))):
        raise ValueError("the chat template does not show each message's content once, in order")
    whole = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)
    for shown in (lambda s: s, str.strip):  # Llama 3's template trims each message (jinja's trim is str.strip)
        parts = [(pieces[0], True)]
        for i, message in enumerate(messages):
            parts += [(shown(str(message["content"])), False), (pieces[2 * i + 2], True)]
        if "".join(p for p, _ in parts) == whole:
            return parts
    raise ValueError("the chat template rewrites message content: it cannot be rendered with the content as text")


def render_ids(tokenizer, messages: Sequence[dict], add_generation_prompt: bool = True) -> list[int]:
    """The conversation's ids: the template's structure with its control tokens, every message's content as text."""
    return encode_parts(tokenizer, template_parts(tokenizer, messages, add_generation_prompt))
