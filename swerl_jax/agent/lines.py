"""Line arithmetic over a file's text without a list of its lines: the editor's host memory stays bounded.

A file of 8 MiB of newlines is 8 million lines; `str.splitlines()` makes 8 million string objects (~500 MB of host
memory) and formatting each with its number another ~200 MB, per `view`, although the observation keeps 8,000
characters. Here lines are found by offsets: `Lines` counts and locates them chunk by chunk with `str.count` and
`str.find`, and `numbered` formats only the lines the observation keeps, giving exactly the text that numbering
every line and cutting the result would give.

Lines break where `str.splitlines` breaks them (the editor's text has "\\r" and "\\r\\n" made "\\n" already):
"\\n", "\\v", "\\f", "\\x1c"-"\\x1e", "\\x85", "\\u2028", "\\u2029"; each is one character, so mapping them all to "\\n"
keeps every offset.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_OTHER_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_TO_NEWLINE = dict.fromkeys(map(ord, "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), "\n")
_CHUNK = 1 << 16  # characters counted per step while skipping to a line


class Lines:
    """The lines of `text` as `str.splitlines` would split them, located by offset."""

    def __init__(self, text: str) -> None:
        # str.translate, not re.sub: on millions of matches re.sub builds a list of pieces (+221 MiB of host memory
        # for 8 MiB of "x\f\n", red-team 2026-11-27); translate writes one new string
        self.text = text.translate(_TO_NEWLINE) if _OTHER_BREAKS.search(text) else text
        breaks = self.text.count("\n")
        self.count = breaks + (0 if not self.text or self.text.endswith("\n") else 1)

    def start(self, line: int) -> int:
        """The offset where 1-based `line` starts (len(text) for line count + 1)."""
        if line <= 1:
            return 0
        need, at = line - 1, 0  # breaks to pass
        while True:  # whole chunks first (C-speed counting, no allocation), then break by break in the last
            chunk_end = min(len(self.text), at + _CHUNK)
            seen = self.text.count("\n", at, chunk_end)
            if seen >= need or chunk_end == len(self.text):
                break
            need -= seen
            at = chunk_end
        for _ in range(need):
            found = self.text.find("\n", at)
            if found < 0:
                return len(self.text)
            at = found + 1
        return at

    def line_at(self, offset: int) -> tuple[int, int]:
        """(start, end) offsets of the line starting at `offset`, end excluding its break."""
        end = self.text.find("\n", offset)
        return offset, len(self.text) if end < 0 else end


def _width(first: int, last: int) -> int:
    """Characters of the numbers `f"{i:6d}"` for i in first..last."""
    total, digits = 0, 1
    while 10 ** (digits - 1) <= last:
        lo, hi = max(first, 10 ** (digits - 1) if digits > 1 else 0), min(last, 10 ** digits - 1)
        if lo <= hi:
            total += (hi - lo + 1) * max(6, digits)
        digits += 1
    return total


def numbered(lines: Lines, first: int, last: int, cut: Callable[[str, str, int], str], head: int,
             tail: int, limit: int) -> str:
    """Lines `first`..`last` (1-based, inclusive) as "{i:6d}\\t{line}" joined by "\\n", then cut as `cut` cuts a
    text longer than `limit`: its first `head` and last `tail` characters and the total length, so only those
    lines are formatted."""
    if last < first:
        return ""
    text = lines.text
    begin = lines.start(first)
    end = lines.line_at(lines.start(last))[1]
    count = last - first + 1
    total = _width(first, last) + count + (end - begin - (count - 1)) + (count - 1)  # numbers, tabs, text, "\n"s
    if total <= limit:
        return "\n".join(f"{i:6d}\t{text[s:e]}" for i, (s, e) in _forward(lines, first, last, begin))
    front, size = [], -1  # size: the joined text's length
    for i, (s, e) in _forward(lines, first, last, begin):
        front.append(f"{i:6d}\t{text[s:min(e, s + head)]}")
        size += len(front[-1]) + 1
        if size >= head:
            break
    back, size = [], -1
    i, e = last, end
    while size < tail and i >= first:
        s = text.rfind("\n", begin, e) + 1 if i > first else begin
        back.append(f"{i:6d}\t" + text[max(s, e - tail):e])
        size += len(back[-1]) + 1
        i, e = i - 1, s - 1
    return cut("\n".join(front)[:head], "\n".join(reversed(back))[-tail:], total)


def _forward(lines: Lines, first: int, last: int, begin: int):
    """(line number, (start, end)) from `first` to `last`, starting at offset `begin`."""
    at = begin
    for i in range(first, last + 1):
        s, e = lines.line_at(at)
        yield i, (s, e)
        at = e + 1
