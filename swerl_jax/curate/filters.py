"""PR filters (pure functions): bots, empty/huge changes, lock files, version bumps, docs, generated/binary files.

Each filter returns True when the PR must be dropped; the pipeline applies them in ``FILTER_ORDER`` and
records the first one that fires, so the funnel's counts are sequential like the paper's 24M -> 11M table.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence

from swerl_jax.curate.config import CurateConfig

# The order the funnel reports; "duplicate" runs later (it needs every PR's content hash).
# docs_only precedes version_bump: a changelog edit that only mentions versions is a docs change.
FILTER_ORDER = ("bot", "empty", "too_large", "lock_only", "docs_only", "version_bump", "generated_or_binary_only")

BOT_MARKERS = ("[bot]", "dependabot", "renovate", "bump", "automerge")

LOCK_FILES = frozenset({
    "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "poetry.lock", "pipfile.lock",
    "cargo.lock", "gemfile.lock", "composer.lock", "go.sum", "uv.lock", "pdm.lock", "mix.lock", "podfile.lock",
    "packages.lock.json", "flake.lock", "pubspec.lock", "bun.lockb",
})
DOC_EXTS = frozenset({".md", ".rst", ".txt", ".adoc", ".asciidoc", ".rdoc", ".org", ".tex"})
DOC_NAMES = frozenset({
    "changes", "changelog", "history", "authors", "contributors", "license", "licence", "copying", "notice",
    "readme", "news", "contributing", "code_of_conduct", "security", "todo", "maintainers",
})
DOC_DIRS = frozenset({"doc", "docs", "documentation", "man"})
GENERATED_SUFFIXES = (".min.js", ".min.css", ".map", "_pb2.py", "_pb2_grpc.py", ".pb.go", ".pb.cc", ".pb.h", ".pyc")
GENERATED_DIRS = frozenset({"dist", "node_modules", "__pycache__", ".tox", "site-packages"})
PROGRAMMING_EXTS = frozenset({
    ".py", ".pyi", ".pyx", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cu", ".java", ".kt", ".kts", ".scala",
    ".go", ".rs", ".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".rb", ".php", ".cs", ".fs", ".swift", ".m", ".mm",
    ".r", ".jl", ".lua", ".pl", ".pm", ".sh", ".bash", ".zsh", ".ps1", ".hs", ".ml", ".mli", ".ex", ".exs", ".erl",
    ".clj", ".dart", ".groovy", ".sql", ".vue", ".svelte", ".zig", ".nim", ".f90", ".f", ".v", ".sv", ".vhd",
})
# A changed line of a version bump: mentions a version number or the word "version" and nothing else of note.
_VERSION_LINE = re.compile(
    r"""^\s*(?:[\w.\-"' ]*(?:version|release|__version__|VERSION)[\w.\-"' ]*[:=]?\s*)?["'(v]?"""
    r"""\d+\.\d+(?:\.\d+)*(?:[.\-]?(?:dev|a|b|rc|post)\d*)?["')]?[,;]?\s*(?:\(.*\))?\s*$""",
    re.IGNORECASE,
)


# Git trailers that credit others: pre-commit-ci[bot] co-authors human PRs (its autofix commits get squashed in).
_CREDIT_TRAILER = re.compile(r"^[ \t]*co-authored-by:.*$", re.IGNORECASE | re.MULTILINE)


def is_bot(texts: Iterable[str]) -> bool:
    """Whether any of title/description/user/branch contains a bot marker ("[bot]", "dependabot", ...).

    "Co-authored-by:" trailers are not read: a bot credited as co-author did not open the PR.
    """
    lowered = [_CREDIT_TRAILER.sub("", t.lower()) for t in texts if t]
    return any(marker in t for t in lowered for marker in BOT_MARKERS)


def is_lock_file(path: str) -> bool:
    """Dependency lock files (package-lock.json, poetry.lock, go.sum, any ``*.lock``)."""
    name = posixpath.basename(path).lower()
    return name in LOCK_FILES or name.endswith(".lock")


def is_doc_file(path: str) -> bool:
    """Documentation: doc extensions, doc folders, or top-level prose files (CHANGES, AUTHORS, LICENSE, ...)."""
    lowered = path.lower()
    parts = lowered.split("/")
    stem, ext = posixpath.splitext(parts[-1])
    return ext in DOC_EXTS or stem in DOC_NAMES or any(p in DOC_DIRS for p in parts[:-1])


def is_generated_file(path: str) -> bool:
    """Generated artefacts: minified bundles, source maps, protobuf output, build folders."""
    lowered = path.lower()
    return lowered.endswith(GENERATED_SUFFIXES) or any(p in GENERATED_DIRS for p in lowered.split("/")[:-1])


def is_programming_file(path: str) -> bool:
    """Source code in a programming language (by extension): the RL seeds' "programming files" condition."""
    return posixpath.splitext(path.lower())[1] in PROGRAMMING_EXTS


def changed_lines(patch: str) -> list[str]:
    """The added/removed lines of a unified diff, without their +/- marker (file headers excluded)."""
    out = []
    for line in patch.splitlines():
        if line.startswith(("+++ ", "--- ")):
            continue
        if line.startswith(("+", "-")):
            out.append(line[1:])
    return out


def is_version_bump(patch: str) -> bool:
    """Every non-blank changed line only states a version number (``__version__ = "2.1.0"``, ``Release 2.1``)."""
    lines = [ln for ln in changed_lines(patch) if ln.strip()]
    return bool(lines) and all(_VERSION_LINE.match(ln) for ln in lines)


def drop_reason(
    *,
    texts: Sequence[str],
    paths: Sequence[str],
    binary_paths: Sequence[str],
    patch: str,
    context_bytes: int,
    max_file_bytes_seen: int,
    config: CurateConfig,
) -> str | None:
    """The first filter of ``FILTER_ORDER`` that drops this PR, or None to keep it.

    ``texts``: title, body, user, branch; ``paths``: every changed path (old and new names); ``binary_paths``:
    those whose content is binary; ``patch``: the cumulative diff; ``context_bytes``: size of code_context +
    oracle_new_content; ``max_file_bytes_seen``: the largest modified file (base or head).
    """
    if is_bot(texts):
        return "bot"
    if not paths:
        return "empty"
    n_lines = len(changed_lines(patch))
    if (
        len(set(paths)) > config.max_changed_files
        or n_lines > config.max_changed_lines
        or max_file_bytes_seen > config.max_file_bytes
        or context_bytes > config.max_context_bytes
    ):
        return "too_large"
    if all(is_lock_file(p) for p in paths):
        return "lock_only"
    if all(is_doc_file(p) for p in paths):
        return "docs_only"
    if is_version_bump(patch):
        return "version_bump"
    binary = set(binary_paths)
    if all(p in binary or is_generated_file(p) for p in paths):
        return "generated_or_binary_only"
    return None
