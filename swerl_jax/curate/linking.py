"""Linked issues: the closing keywords GitHub recognises in PR titles, bodies and commit messages.

GitHub links a PR to an issue when the text says ``close[sd]``, ``fix(es|ed)`` or ``resolve[sd]`` (any case,
optional colon) followed by ``#N``, ``owner/repo#N`` or ``https://github.com/owner/repo/issues/N``.
Only references to the PR's own repository are returned: another repository's issue cannot be the
problem statement of this repository's change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_KEYWORD = r"(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)"
_REF = (
    r"(?:(?P<url>https?://github\.com/(?P<url_repo>[\w.-]+/[\w.-]+)/issues/(?P<url_num>\d+))"
    r"|(?P<full_repo>[\w.-]+/[\w.-]+)?#(?P<num>\d+))"
)
_LINK_RE = re.compile(rf"(?<![\w-]){_KEYWORD}:?\s+{_REF}", re.IGNORECASE)

# Words that mark an issue as a bug report (title, body or labels) for the RL-seed selection.
_BUG_RE = re.compile(
    r"\b(?:bugs?|fix(?:es|ed)?|errors?|exceptions?|crash(?:es|ed)?|traceback|fail(?:s|ed|ure|ing)?|"
    r"incorrect(?:ly)?|wrong|broken|regression|not work(?:ing)?|doesn't work|unexpected)\b",
    re.IGNORECASE,
)


def linked_issues(texts: Iterable[str], repo: str) -> list[int]:
    """Issue numbers of ``repo`` ("owner/name") that ``texts`` close with a GitHub keyword, in first-seen order."""
    repo_l = repo.lower()
    found: list[int] = []
    for text in texts:
        for m in _LINK_RE.finditer(text or ""):
            if m.group("url"):
                target, num = m.group("url_repo"), m.group("url_num")
            else:
                target, num = m.group("full_repo") or repo, m.group("num")
            n = int(num)
            if target.lower() == repo_l and n not in found:
                found.append(n)
    return found


def is_bug_report(title: str, body: str, labels: Iterable[str] = ()) -> bool:
    """Whether an issue reads as a bug report: a label containing "bug" or bug words in its title or body."""
    if any("bug" in label.lower() for label in labels):
        return True
    return bool(_BUG_RE.search(title or "") or _BUG_RE.search(body or ""))
