"""Injected bugs in real code: AST mutation operators over the functions of a repository at a commit (SWE-smith's
procedural modification, arXiv 2504.21798), named after the testbed's bug families they reproduce.

    for m in candidates(sources, seed=0): m.kind, m.file, m.function, m.line, m.bug_patch(), m.gold_patch()

Every operator finds a site with `ast` and rewrites only that site's bytes (line/column offsets from the parse), so
the rest of the file stays byte-identical and the inverse patch restores it. A candidate that does not parse, or
whose tree equals the original's (a swap of equal arguments), is never made. The order is a pure function of the
sources and the seed: sites are sorted, then shuffled by `random.Random(seed)` and interleaved by kind.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import random
import re
from collections.abc import Callable, Iterator

from swerl_jax.testbed import families

# operator kind -> the testbed family (swerl_jax/testbed/families.py) whose bug it injects into real code
KINDS: dict[str, Callable] = {
    "wrong_comparison": families.wrong_comparison,  # a flipped comparison
    "off_by_one": families.off_by_one,  # an integer bound or index one off
    "swapped_args": families.swapped_args,  # two positional arguments swapped
    "missing_none_check": families.missing_none_check,  # a guard (if ...: return/raise/continue) dropped
    "missing_return": families.missing_return,  # `return x` becomes the bare expression `x`
    "wrong_arithmetic": families.wrong_arithmetic,  # + - * / // % swapped for a sibling operator
    "wrong_bool_op": families.wrong_bool_op,  # and <-> or
    "inverted_condition": families.inverted_condition,  # an if/while test negated
    "wrong_default": families.wrong_default,  # a True/False literal (default or constant) inverted
}
PAIR = "pair"  # two mutations in different functions of one file
PAIR_EVERY = 10  # a pair after every this many singles (while pairs last)

_COMPARE_FLIP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
                 ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"),
                 ast.NotIn: ("not in", "in"), ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is")}
_ARITH_SWAP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "+"), ast.FloorDiv: ("//", "/"),
               ast.Div: ("/", "//"), ast.Mod: ("%", "//")}
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace bytes [start, end) of the file's UTF-8 text (`old`, kept to check and invert) by `new`."""

    start: int
    end: int
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One candidate bug: `kind` (a KINDS key or "pair"), the file, the function's qualified name, the 1-based
    line, the edits (one file), and for a pair its two parts. `original` is the file's text at the commit."""

    kind: str
    file: str
    function: str
    line: int
    edits: tuple[Edit, ...]
    original: str = dataclasses.field(repr=False, compare=False)
    parts: tuple[Mutation, ...] = ()

    @property
    def key(self) -> str:
        """A stable id: what the mutation changes, where (the cache and the instance id use it)."""
        material = f"{self.kind}|{self.file}|{self.function}|" + "|".join(
            f"{e.start}:{e.end}:{e.old}->{e.new}" for e in self.edits)
        return hashlib.sha256(material.encode()).hexdigest()[:12]

    def describe(self) -> dict:
        """kind, file, function, line (and the parts of a pair), as stored with the instance."""
        out = {"kind": self.kind, "file": self.file, "function": self.function, "line": self.line, "key": self.key}
        if self.parts:
            out["parts"] = [p.describe() for p in self.parts]
        return out

    def mutated(self) -> str:
        """The file's text with the bug."""
        return apply_edits(self.original, self.edits)

    def valid(self, original_dump: str | None = None) -> bool:
        """Whether the mutated file parses and its tree differs from the original's."""
        try:
            changed = ast.dump(ast.parse(self.mutated()))
            before = original_dump if original_dump is not None else ast.dump(ast.parse(self.original))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            return False
        return changed != before

    def bug_patch(self) -> str:
        """The unified diff that injects the bug."""
        return unified_diff(self.file, self.original, self.mutated())

    def gold_patch(self) -> str:
        """The inverse: the diff that fixes it (the task's reference solution)."""
        return unified_diff(self.file, self.mutated(), self.original)


def apply_edits(text: str, edits: tuple[Edit, ...]) -> str:
    """`text` with non-overlapping byte-range `edits` applied (each checked against its `old` bytes)."""
    data = text.encode()
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        if data[edit.start:edit.end].decode() != edit.old:
            raise ValueError(f"edit at byte {edit.start} expected {edit.old!r}, found "
                             f"{data[edit.start:edit.end].decode(errors='replace')!r}")
        data = data[:edit.start] + edit.new.encode() + data[edit.end:]
    return data.decode()


def unified_diff(path: str, before: str, after: str) -> str:
    """A git-style unified diff of one file (what `git apply` and `patch -p1` read)."""
    lines = list(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                      f"a/{path}", f"b/{path}", n=3))
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return f"diff --git a/{path} b/{path}\n{body}"


class _Sites:
    """Offsets of one parsed file: AST (line, column in UTF-8 bytes) -> byte offset, and a node's text."""

    def __init__(self, text: str):
        self.data = text.encode()
        self.starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.starts[node.lineno - 1] + node.col_offset, self.starts[node.end_lineno - 1] + node.end_col_offset)

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode()


def _token_edit(sites: _Sites, left: ast.AST, right: ast.AST, old: str, new: str) -> Edit | None:
    """Replace operator token `old` in the gap between two operand nodes (parentheses and spaces around it kept)."""
    start, end = sites.span(left)[1], sites.span(right)[0]
    gap = sites.text(start, end)
    pattern = r"(?<![\w<>=!])" + re.escape(old).replace(r"\ ", r"\s+") + r"(?![\w<>=/*])" if old[0].isalpha() else \
        r"(?<![<>=!/*%+-])" + re.escape(old) + r"(?![<>=/*])"
    found = list(re.finditer(pattern, gap))
    if len(found) != 1 or "#" in gap:
        return None
    a, b = found[0].span()
    return Edit(start + len(gap[:a].encode()), start + len(gap[:b].encode()), found[0].group(0), new)


def _site_edits(node: ast.AST, sites: _Sites) -> Iterator[tuple[str, int, tuple[Edit, ...]]]:
    """(kind, line, edits) of every mutation at `node` (one node may give several kinds)."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_FLIP:
        old, new = _COMPARE_FLIP[type(node.ops[0])]
        edit = _token_edit(sites, node.left, node.comparators[0], old, new)
        if edit:
            yield "wrong_comparison", node.lineno, (edit,)
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAP:
        old, new = _ARITH_SWAP[type(node.op)]
        edit = _token_edit(sites, node.left, node.right, old, new)
        if edit:
            yield "wrong_arithmetic", node.lineno, (edit,)
    elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        edit = _token_edit(sites, node.values[0], node.values[1], old, new)
        if edit:
            yield "wrong_bool_op", node.lineno, (edit,)
    elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args):
        (a0, a1), (b0, b1) = sites.span(node.args[0]), sites.span(node.args[1])
        first, second = sites.text(a0, a1), sites.text(b0, b1)
        if first != second:
            yield "swapped_args", node.lineno, (Edit(a0, a1, first, second), Edit(b0, b1, second, first))
    elif isinstance(node, (ast.If, ast.While)):
        start, end = sites.span(node.test)
        test = sites.text(start, end)
        if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not):
            inner = sites.span(node.test.operand)
            yield "inverted_condition", node.lineno, (Edit(start, inner[0], sites.text(start, inner[0]), ""),)
        elif "\n" not in test:
            yield "inverted_condition", node.lineno, (Edit(start, end, test, f"not ({test})"),)
        if (isinstance(node, ast.If) and not node.orelse and len(node.body) == 1
                and isinstance(node.body[0], _EXITS)):
            s, e = sites.span(node)
            yield "missing_none_check", node.lineno, (Edit(s, e, sites.text(s, e), "pass"),)
    elif isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        s, v = sites.span(node)[0], sites.span(node.value)[0]
        if sites.text(s, v).startswith("return") and sites.text(s, v).strip() == "return":
            yield "missing_return", node.lineno, (Edit(s, v, sites.text(s, v), ""),)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        s, e = sites.span(node)
        yield "wrong_default", node.lineno, (Edit(s, e, str(node.value), str(not node.value)),)
    elif isinstance(node, ast.Subscript):
        bound = node.slice
        for part in ((bound.lower, bound.upper) if isinstance(bound, ast.Slice) else (bound,)):
            if isinstance(part, ast.Constant) and type(part.value) is int:
                s, e = sites.span(part)
                yield "off_by_one", node.lineno, (Edit(s, e, sites.text(s, e), str(part.value + 1)),)
            elif isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.USub) and isinstance(
                    part.operand, ast.Constant) and type(part.operand.value) is int:
                s, e = sites.span(part)
                yield "off_by_one", node.lineno, (Edit(s, e, sites.text(s, e), str(-part.operand.value - 1)),)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        for arg in node.args[:2]:
            if isinstance(arg, ast.Constant) and type(arg.value) is int:
                s, e = sites.span(arg)
                yield "off_by_one", arg.lineno, (Edit(s, e, sites.text(s, e), str(arg.value + 1)),)


_SKIP_FUNCTIONS = frozenset({"__repr__", "__str__", "__hash__", "__dir__", "__init_subclass__"})


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every function and method, outermost first."""
    def walk(body: list, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{node.name}", node
                yield from walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                yield from walk(getattr(node, "body", []) + getattr(node, "orelse", []), prefix)
    yield from walk(tree.body, "")


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body (docstring and decorators excluded, nested functions left to themselves)."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    stack = list(reversed(body)) + list(function.args.defaults) + [d for d in function.args.kw_defaults if d]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def file_mutations(path: str, text: str, exercised: Callable[[str], bool] = lambda name: True,
                   check: bool = True) -> list[Mutation]:
    """Every single mutation of the functions of one source file whose (simple) name `exercised` accepts; []
    for a file that does not parse. With `check`, each one is parsed and kept only when it changes the tree;
    without, that is left to `Mutation.valid` when the candidate is used (a large repository has thousands)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    original = ast.dump(tree)
    sites = _Sites(text)
    found = []
    for qualname, function in _functions(tree):
        name = qualname.rsplit(".", 1)[-1]
        if name in _SKIP_FUNCTIONS or not exercised(name):
            continue
        for node in _own_nodes(function):
            for kind, line, edits in _site_edits(node, sites):
                mutation = Mutation(kind, path, qualname, line, edits, text)
                if not check or mutation.valid(original):
                    found.append(mutation)
    return found


def pair(a: Mutation, b: Mutation) -> Mutation | None:
    """Two mutations of one file in different functions, as one candidate (None when they overlap)."""
    if a.file != b.file or a.function == b.function:
        return None
    edits = tuple(sorted(a.edits + b.edits, key=lambda e: e.start))
    if any(x.end > y.start for x, y in zip(edits, edits[1:])):
        return None
    first, second = sorted((a, b), key=lambda m: m.line)
    return Mutation(PAIR, a.file, f"{first.function}+{second.function}", first.line, edits, a.original,
                    (first, second))


def _spread(items: list[Mutation], rng: random.Random) -> list[Mutation]:
    """`items` shuffled, then dealt round-robin across their files (the by-file split needs many files)."""
    by_file: dict[str, list[Mutation]] = {}
    for m in items:
        by_file.setdefault(m.file, []).append(m)
    queues = [by_file[f] for f in sorted(by_file)]
    for q in queues:
        rng.shuffle(q)
    rng.shuffle(queues)
    out: list[Mutation] = []
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    return out


def candidates(mutations: list[Mutation], seed: int, pairs: int = 0) -> list[Mutation]:
    """`mutations` in a seeded order that interleaves kinds and, within a kind, files (a small --limit still sees
    every operator and many files), with `pairs` pairs of mutations of one file, drawn with the same seed, one
    after every few singles."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Mutation]] = {}
    for m in sorted(mutations, key=lambda m: (m.file, m.line, m.kind, m.key)):
        by_kind.setdefault(m.kind, []).append(m)
    queues = [_spread(by_kind[k], rng) for k in sorted(by_kind)]
    order: list[Mutation] = []
    while any(queues):
        order += [q.pop(0) for q in queues if q]
    made: list[Mutation] = []
    by_file: dict[str, list[Mutation]] = {}
    for m in order:
        by_file.setdefault(m.file, []).append(m)
    files = sorted(f for f, ms in by_file.items() if len({m.function for m in ms}) > 1)
    for _ in range(pairs * 20):
        if len(made) >= pairs or not files:
            break
        group = by_file[rng.choice(files)]
        both = pair(*rng.sample(group, 2))
        if both is not None and both.key not in {p.key for p in made}:
            made.append(both)
    step = max(1, min(PAIR_EVERY, len(order) // (len(made) + 1)))
    for i, p in enumerate(made):
        order.insert(min(len(order), (i + 1) * step + i), p)
    return order
