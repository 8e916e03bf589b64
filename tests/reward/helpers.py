"""Helpers for the reward tests: building answers and gold edits from real PR records."""

from __future__ import annotations


def answer(blocks: list[tuple[str, str, str]], thought: str = "reasoning") -> str:
    """A well-formed output with the given (path, search, replace) blocks."""
    body = "".join(
        f"```python\n### {p}\n<<<<<<< SEARCH\n{s}\n=======\n{r}\n>>>>>>> REPLACE\n```\n\n"
        for p, s, r in blocks
    )
    return f"<think>\n{thought}\n</think>\n<solution>\n{body}</solution>"


def gold_block(old: str, new: str, path: str) -> tuple[str, str, str]:
    """One SEARCH/REPLACE block turning ``old`` into ``new``: the changed line span, widened with context
    lines until ``"\\n" + search`` occurs once in ``"\\n" + old`` (the tests check it reproduces ``new``)."""
    a, b = old.split("\n"), new.split("\n")
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    tail = 0
    while tail < min(len(a), len(b)) - start and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo, hi = start, len(a) - tail
    while True:
        search = "\n".join(a[lo:hi])
        if hi > lo and ("\n" + old).count("\n" + search) == 1:
            break
        lo, hi = max(lo - 1, 0), min(hi + 1, len(a))
    return path, search, "\n".join(b[lo:len(b) - (len(a) - hi)])
