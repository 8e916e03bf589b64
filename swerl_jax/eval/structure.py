"""A repository's structure at a commit, read from a git clone: the nested dict Agentless's precomputed structure
files hold (`{dir: {file.py: {"classes": [...], "functions": [...], "text": [lines]}}}`), made here instead of
downloaded.

Files are read from git objects (`git ls-tree` + `git cat-file --batch`), so nothing is checked out and the clone
may be bare. A Python file that does not parse (Python 2 syntax, say) keeps its text with no classes/functions;
non-Python files are listed with their text too (Agentless filters them before showing the tree).
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import warnings

FileEntry = dict  # {"classes": [...], "functions": [...], "text": [lines]}


def _definitions(source: str) -> tuple[list[dict], list[dict]]:
    """Top-level classes (with their methods) and top-level functions, with 1-based line spans."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old code are not our concern
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return [], []
    classes, functions = [], []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods = [{"name": m.name, "start_line": m.lineno, "end_line": m.end_lineno}
                       for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
            classes.append({"name": node.name, "start_line": node.lineno, "end_line": node.end_lineno,
                            "methods": methods})
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.append({"name": node.name, "start_line": node.lineno, "end_line": node.end_lineno})
    return classes, functions


def read_tree(git_dir: str | pathlib.Path, commit: str, suffix: str = "") -> dict[str, str]:
    """{path: text} of every blob at `commit` (only paths ending in `suffix` when given); undecodable blobs are
    skipped."""
    git = ["git", "--git-dir", str(git_dir)] if pathlib.Path(git_dir).name.endswith(".git") or \
        (pathlib.Path(git_dir) / "HEAD").is_file() else ["git", "-C", str(git_dir)]
    listing = subprocess.run([*git, "ls-tree", "-r", "-z", commit], capture_output=True, check=True).stdout
    entries = []
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, path = item.split(b"\t", 1)
        mode, kind, sha = meta.split()
        name = path.decode("utf-8", "surrogateescape")
        if kind == b"blob" and mode != b"120000" and name.endswith(suffix):
            entries.append((name, sha.decode()))
    if not entries:
        return {}
    batch = subprocess.run([*git, "cat-file", "--batch"], input="".join(f"{s}\n" for _, s in entries).encode(),
                           capture_output=True, check=True).stdout
    files, pos = {}, 0
    for name, _ in entries:
        header_end = batch.index(b"\n", pos)
        size = int(batch[pos:header_end].split()[2])
        blob = batch[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
        try:
            files[name] = blob.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return files


def build_structure(files: dict[str, str]) -> dict:
    """The nested structure dict of `{path: text}`."""
    root: dict = {}
    for path in sorted(files):
        parts = path.split("/")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        text = files[path]
        classes, functions = _definitions(text) if path.endswith(".py") else ([], [])
        node[parts[-1]] = {"classes": classes, "functions": functions, "text": text.splitlines()}
    return root


def repo_structure(git_dir: str | pathlib.Path, commit: str) -> dict:
    """The structure of the repository at `commit` (Python files only, as Agentless uses it)."""
    return build_structure(read_tree(git_dir, commit, suffix=".py"))


def is_file_entry(value: object) -> bool:
    """A file's entry (vs a directory): exactly the three keys Agentless's structure gives a file."""
    return isinstance(value, dict) and set(value) == {"classes", "functions", "text"}


def file_contents(structure: dict, prefix: str = "") -> dict[str, str]:
    """{path: text} of every file in a structure dict."""
    out = {}
    for name, value in structure.items():
        path = f"{prefix}/{name}" if prefix else name
        if is_file_entry(value):
            out[path] = "\n".join(value["text"])
        elif isinstance(value, dict):
            out.update(file_contents(value, path))
    return out
