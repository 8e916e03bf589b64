"""Patch normalization for voting: two samples that differ only in formatting, comments or docstrings vote alike.

As the release: each edited file's old and new contents go through `ast.parse` -> `ast.unparse` (left as they are
when they do not parse), then comments and docstrings are removed with the tokenizer (blank lines dropped; the
un-stripped text is kept when stripping breaks the syntax); the normalized patch is the git diff of the results,
and when the change only adds new functions (no function removed or changed) only its +/- lines are kept, so
where a new function lands does not matter. The normalized patch is a vote key, not a patch to apply.
"""

from __future__ import annotations

import ast
import io
import tokenize

from swerl_jax.eval.agentless.repair import git_diff


def unparsed(code: str) -> str:
    """`ast.unparse(ast.parse(code))`, or the code itself when it does not parse."""
    try:
        return ast.unparse(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError):
        return code


def strip_comments_and_docstrings(source: str) -> str:
    """The source without comments, docstrings (strings that open a statement) and blank lines."""
    out, prev_type, last_line, last_col = "", tokenize.INDENT, -1, 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        kind, text, (start_line, start_col), (end_line, end_col) = tok[0], tok[1], tok[2], tok[3]
        if start_line > last_line:
            last_col = 0
        if start_col > last_col:
            out += " " * (start_col - last_col)
        if kind == tokenize.COMMENT:
            pass
        elif kind == tokenize.STRING:
            # A string right after an indent or a newline opens a statement: a docstring (or a bare string).
            if prev_type not in (tokenize.INDENT, tokenize.NEWLINE) and start_col > 0:
                out += text
        else:
            out += text
        prev_type, last_col, last_line = kind, end_col, end_line
    return "\n".join(line for line in out.splitlines() if line.strip())


def _preorder(node: ast.AST):
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _preorder(child)


def _functions(code: str) -> dict[str, str]:
    """Module-level functions and methods (`Class.method`), each as unparsed source."""
    tree = ast.parse(code)
    found: dict[str, str] = {}

    def visit(node: ast.AST, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and not in_class:
                found[child.name] = ast.unparse(child)
            visit(child, in_class or isinstance(child, ast.ClassDef))

    visit(tree, False)
    # depth-first, as the release's NodeVisitor: a nested class named like a later one must not win (ast.walk is
    # breadth-first and would let it)
    for node in _preorder(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}.{item.name}"] = ast.unparse(item)
    return found


def only_adds_functions(old: str, new: str) -> bool:
    """The change adds functions and removes or changes none."""
    before, after = _functions(old), _functions(new)
    if set(before) - set(after):
        return False
    if any(before[name] != after[name] for name in before):
        return False
    return bool(set(after) - set(before))


def normalize_patch(patch: str, old_contents: list[str], new_contents: list[str], files: list[str]) -> str:
    """The vote key of a sample's patch ("" for an empty patch)."""
    if not patch.strip():
        return ""
    key = ""
    for old, new, path in zip(old_contents, new_contents, files):
        old, new = unparsed(old), unparsed(new)
        try:
            old_s, new_s = strip_comments_and_docstrings(old), strip_comments_and_docstrings(new)
            ast.parse(old_s)
            ast.parse(new_s)
        except (SyntaxError, ValueError, tokenize.TokenError, IndentationError):
            old_s, new_s = old, new
        diff = git_diff([path], [old_s], [new_s])
        try:
            new_only = only_adds_functions(old_s, new_s)
        except (SyntaxError, ValueError):
            new_only = False
        if new_only:
            diff = "\n".join(line for line in diff.splitlines() if line.startswith(("-", "+")))
        key += diff
    return key
