"""The answer format, owned here: a thought in <think>...</think>, then SEARCH/REPLACE edits in <solution>.

Written by `format_edit_block` / `format_answer` (SFT targets: `swerl_jax.data.targets`; scripted models in tests
and evaluation) and read by `extract_thought_solution` / `find_blocks` / `parse_search_replace` (the reward, the
analysis, Agentless Mini), so the two sides cannot drift. The prompt that asks for it is the release's text,
quoted verbatim in `swerl_jax.data.prompts` (tests/test_answer.py checks that it names these markers). No JAX, no
project imports: the reward service's workers import this module.

The official SWE-RL reward extracts edit blocks with ``re.findall`` and this pattern (no flags)::

    ```.*?\\n### (.*)\\n<<<<<<< SEARCH\\n([\\s\\S]*?)\\n=======\\n([\\s\\S]*?)\\n>>>>>>> REPLACE\\n```

The pattern backtracks: a block header without a later ``=======`` or ``REPLACE`` line makes the regex
engine rescan the rest of the text from every following start position, which is quadratic (a 10 MB
output with thousands of unterminated headers never finishes). ``find_blocks`` computes exactly the
matches ``re.findall`` returns, in linear time, with ``str.find``:

* ``.`` does not match a newline, so the lazy ``.*?`` after the fence must run to the end of the fence
  line and the greedy path group is exactly the next line after ``### ``: a start position has one
  possible header.
* lazy search then lazy replace: the match takes the first ``\\n=======\\n`` after the header and then
  the first terminator after it; if either is missing no later header can match either (its body
  starts no earlier), so the scan stops.
"""

from __future__ import annotations

import re

THINK_START = "<think>"
THINK_END = "</think>"
ANSWER_START = "<solution>"
ANSWER_END = "</solution>"
TAGS = (THINK_START, THINK_END, ANSWER_START, ANSWER_END)

SEARCH_REPLACE_REGEX = (
    r"```.*?\n### (.*)\n<<<<<<< SEARCH\n([\s\S]*?)\n=======\n([\s\S]*?)\n>>>>>>> REPLACE\n```"
)

# Every tag starts with its only "<", so no two occurrences of tags overlap: one left-to-right scan for
# all four finds exactly the occurrences str.count counts for each (5x faster than four counts).
_TAG_PATTERN = re.compile("</?(?:think|solution)>")

_FENCE = "```"
_PATH_PREFIX = "\n### "
_SEARCH_OPEN = "\n<<<<<<< SEARCH\n"
_DIVIDER = "\n=======\n"
_TERMINATOR = "\n>>>>>>> REPLACE\n```"


class FormatError(Exception):
    """A malformed answer. ``str(err)`` is the official release's message; the attributes say where.

    reason: one of tag_count, empty_thought, no_blocks, identical_search_replace, search_not_found,
    file_too_large. tag / block_index / path locate the failure when they apply (block_index counts the
    blocks of one path, in order, from 0).
    """

    def __init__(
        self,
        message: str,
        reason: str,
        *,
        tag: str | None = None,
        block_index: int | None = None,
        path: str | None = None,
    ):
        super().__init__(message)
        self.reason = reason
        self.tag = tag
        self.block_index = block_index
        self.path = path

    def info(self) -> dict:
        """The info dict of a format error: the official ``error`` message plus where it happened."""
        out: dict = {"error": str(self), "reason": self.reason}
        for key in ("tag", "block_index", "path"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def extract_thought_solution(output: str) -> tuple[str, str]:
    """Return (thought, answer), both stripped; each tag must occur exactly once, order is not checked.

    Raises FormatError (reason tag_count naming the tag, or empty_thought).
    """
    counts = dict.fromkeys(TAGS, 0)
    where = {}
    for match in _TAG_PATTERN.finditer(output):
        tag = match.group()
        counts[tag] += 1
        where[tag] = match.start()
    for tag in TAGS:
        if counts[tag] != 1:
            raise FormatError(f"count of {tag} is not 1", "tag_count", tag=tag)
    # The release's splits, ``output.split(START)[1].split(END)[0]``, without copying: the text after the
    # start tag up to the end tag, or to the end of the text when the end tag comes first.
    thought = _between(output, where[THINK_START] + len(THINK_START), where[THINK_END]).strip()
    answer = _between(output, where[ANSWER_START] + len(ANSWER_START), where[ANSWER_END]).strip()
    if len(thought) == 0:
        raise FormatError("Thought is empty", "empty_thought", tag=THINK_START)
    return thought, answer


def _between(text: str, start: int, end: int) -> str:
    return text[start:end] if end >= start else text[start:]


def find_blocks(text: str) -> list[tuple[str, str, str]]:
    """All (path, search, replace) blocks, exactly ``re.findall(SEARCH_REPLACE_REGEX, text)``, in O(len)."""
    blocks: list[tuple[str, str, str]] = []
    pos = 0
    while True:
        fence = text.find(_FENCE, pos)
        if fence < 0:
            return blocks
        line_end = text.find("\n", fence)
        if line_end < 0:
            return blocks
        if not text.startswith(_PATH_PREFIX, line_end):
            # Every fence on this line shares the same (failing) continuation: skip the line.
            pos = line_end + 1
            continue
        path_start = line_end + len(_PATH_PREFIX)
        path_end = text.find("\n", path_start)
        if path_end < 0:
            return blocks
        if not text.startswith(_SEARCH_OPEN, path_end):
            pos = line_end + 1
            continue
        search_start = path_end + len(_SEARCH_OPEN)
        divider = text.find(_DIVIDER, search_start)
        if divider < 0:
            return blocks
        replace_start = divider + len(_DIVIDER)
        terminator = text.find(_TERMINATOR, replace_start)
        if terminator < 0:
            return blocks
        blocks.append((text[path_start:path_end], text[search_start:divider], text[replace_start:terminator]))
        pos = terminator + len(_TERMINATOR)


def parse_search_replace(text: str) -> dict[str, list[tuple[str, str]]]:
    """Group the blocks by path (first appearance order), keeping each path's blocks in order."""
    grouped: dict[str, list[tuple[str, str]]] = {}
    for path, search, replace in find_blocks(text):
        grouped.setdefault(path, []).append((search, replace))
    return grouped


def format_edit_block(path: str, search: str, replace: str, language: str = "python") -> str:
    """One fenced SEARCH/REPLACE edit, as the prompt's example writes it; `find_blocks` reads it back exactly
    when neither side contains the block's own markers on a line of their own."""
    return f"{_FENCE}{language}{_PATH_PREFIX}{path}{_SEARCH_OPEN}{search}{_DIVIDER}{replace}{_TERMINATOR}"


def format_answer(thought: str, edit_blocks: list[str]) -> str:
    """A whole answer: the thought, then the edit blocks (one per line group) inside the solution tags."""
    return f"{THINK_START}\n{thought}\n{THINK_END}\n{ANSWER_START}\n" + "\n".join(edit_blocks) + f"\n{ANSWER_END}"
