"""Repair: whole-file context inside a token budget, the model's search/replace edits applied, a git patch.

As the release: the context lists each localized file as `### path` + its full text, skipping a file that would
overflow the budget (the first file alone when none fits), shuffled when several samples are drawn; the repair
prompt is SWE-RL's `AGENTLESS_REPAIR`. From the answer (its `<solution>` part), the ```python blocks are split into
edits per file (`### path` before `<<<<<<< SEARCH`; repeats dropped); an edit whose search text is not in the
file's original content is dropped, the others are applied in order with `str.replace` (every occurrence); edits
to files not in the context are ignored. The patch is `git diff` of a scratch repository holding the old and new
contents ("\\ No newline at end of file" lines removed, as the release does), and it is kept only when every new
file parses and the change is more than blank lines.
"""

from __future__ import annotations

import ast
import pathlib
import random
import re
import tempfile
from collections.abc import Callable

from swerl_jax.data.prompts import AGENTLESS_REPAIR
from swerl_jax.sandbox.hostgit import host_git

_PYTHON_BLOCK = re.compile(r"```python\n(.*?)\n```", re.DOTALL)
_SEARCH, _REPLACE, _DIVIDER = "<<<<<<< SEARCH", ">>>>>>> REPLACE", "\n=======\n"


def repair_context(files: list[str], contents: dict[str, str], max_input_tokens: int,
                   count_tokens: Callable[[str], int], rng: random.Random | None = None) -> str:
    """The files' text for the repair prompt, within `max_input_tokens`."""
    blocks, used = [], 0
    for path in files:
        block = f"### {path}\n{contents[path]}"
        n = count_tokens(block)
        if used + n > max_input_tokens:
            continue
        used += n
        blocks.append(block)
    if not blocks and files:
        return f"### {files[0]}\n{contents[files[0]]}"
    if rng is not None:
        rng.shuffle(blocks)
    return "\n\n".join(blocks)


def repair_prompt(problem_statement: str, context: str) -> str:
    """SWE-RL's Agentless repair prompt."""
    return AGENTLESS_REPAIR.format(problem_statement=problem_statement, content=context).strip()


def edits_by_file(answer: str) -> dict[str, list[str]]:
    """{path: [edit command]} from the answer's ```python blocks, in order, repeats dropped."""
    by_file: dict[str, list[str]] = {}
    for block in _PYTHON_BLOCK.findall(answer):
        path = None
        for part in block.split(_REPLACE)[:-1]:
            part = part.strip()
            if _SEARCH in part:
                name = part.split(_SEARCH)[0].lstrip("#").strip()
                path = name or path
            pieces = part.split(_SEARCH)
            if len(pieces) != 2:
                continue
            command = f"{_SEARCH}{pieces[1]}\n{_REPLACE}"
            if path is not None and command not in by_file.get(path, []):
                by_file.setdefault(path, []).append(command)
    return by_file


def apply_edits(commands: list[str], content: str) -> str:
    """`content` with the edits whose search text occurs in it applied in order (each replaces every occurrence)."""
    matched = []
    for command in commands:
        body = "\n".join(command.splitlines()[1:-1])
        halves = body.split(_DIVIDER)
        if len(halves) == 2 and halves[0] in content:
            matched.append(halves)
    for search, replace in matched:
        content = content.replace(search, replace)
    return content


def edited_files(answer: str, contents: dict[str, str]) -> tuple[list[str], list[str]]:
    """The files the answer changes (present in the context) and their new contents."""
    paths, new = [], []
    for path, commands in edits_by_file(answer).items():
        if path not in contents:
            continue
        text = apply_edits(commands, contents[path])
        if path and text:
            paths.append(path)
            new.append(text)
    return paths, new


def scratch_path(path: str) -> str:
    """`path` if it names a file inside a repository's work tree, else ValueError: absolute paths, empty, `.` and
    `..` components and `.git` (any case) would write outside the scratch repository or into its git config."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\0" in path or any(
            p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        raise ValueError(f"{path!r} is not a path inside a repository's work tree")
    return path


def git_diff(paths: list[str], old: list[str], new: list[str]) -> str:
    """`git diff` from `old` to `new` contents of `paths`, made in a scratch repository by host git (hooks and
    fsmonitor off: `sandbox.hostgit`); a path outside the work tree is refused (ValueError) before any write."""
    paths = [scratch_path(p) for p in paths]
    with tempfile.TemporaryDirectory(prefix="agentless-diff-") as tmp:
        root = pathlib.Path(tmp)
        config = ("user.name=agentless", "user.email=agentless@localhost", "core.autocrlf=false")
        host_git(tmp, "init", "-q", config=config, check=True)
        for path, text in zip(paths, old):
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        if paths:
            host_git(tmp, "add", "--", *paths, config=config, check=True)
            host_git(tmp, "commit", "-q", "-m", "base", config=config, check=True)
        for path, text in zip(paths, new):
            (root / path).write_text(text)
        return host_git(tmp, "diff", "--no-ext-diff", "--no-textconv", ".", config=config, capture_output=True,
                        check=True).stdout.decode()


def parses(codes: list[str]) -> bool:
    """Every text is non-blank Python that parses."""
    for code in codes:
        if not code.strip():
            return False
        try:
            ast.parse(code)
        except (SyntaxError, ValueError):
            return False
    return True


def _without_blank_lines(code: str) -> str:
    return "\n".join(line for line in code.splitlines() if line.strip())


def only_blank_lines_differ(new: list[str], old: list[str]) -> bool:
    """The change only adds or removes blank lines."""
    return "".join(map(_without_blank_lines, new)) == "".join(map(_without_blank_lines, old))


def answer_patch(answer: str, contents: dict[str, str]) -> dict:
    """The sample's patch and what it was made of: `model_patch` ("" when the edits do not parse or change only
    blank lines), `raw_model_patch`, the edited files and their old and new contents."""
    paths, new = edited_files(answer, contents)
    old = [contents[p] for p in paths]
    raw = git_diff(paths, old, new).replace("\\ No newline at end of file\n", "") if paths else ""
    keep = parses(new) and not only_blank_lines_differ(new, old)
    return {"model_patch": raw.lstrip() if keep else "", "raw_model_patch": raw.lstrip(), "edited_files": paths,
            "original_file_content": old, "new_file_content": new}
