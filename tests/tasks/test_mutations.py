"""Mutation operators on a small source: only the mutated span changes, the gold patch restores the file, the order
is a pure function of the seed, every operator fires, and each names a testbed family."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from swerl_jax.tasks import mutations
from swerl_jax.testbed import families

SOURCE = '''"""A module."""
import math


def clamp(value, low=0, high=10, strict=False):
    """Docstring with < and + inside it."""
    if value is None:
        return None
    if value < low and strict:
        raise ValueError("low")
    while not math.isfinite(value):
        value = high - 1
    return min(max(value, low), high)


class Bag:
    def total(self, items):
        parts = items[1:]
        for i in range(0, len(parts)):
            if parts[i] == 0:
                continue
        return sum(parts) * 2 // 3 + items[-1]
'''


def _all() -> list[mutations.Mutation]:
    return mutations.file_mutations("pkg/mod.py", SOURCE)


def test_every_kind_fires_and_names_a_testbed_family():
    found = {m.kind for m in _all()}
    assert found == set(mutations.KINDS)
    assert all(callable(getattr(families, f.__name__)) for f in mutations.KINDS.values())
    assert {m.function for m in _all()} == {"clamp", "Bag.total"}


def test_only_the_mutated_span_changes_and_the_docstring_is_never_touched():
    data = SOURCE.encode()
    for m in _all():
        out = m.mutated().encode()
        first, last = min(e.start for e in m.edits), max(e.end for e in m.edits)
        grow = len(out) - len(data)
        assert out[:first] == data[:first] and out[last + grow:] == data[last:], m.describe()
        assert "Docstring with < and + inside it." in m.mutated()
        assert m.line >= 5  # the def line (a default) or the body, never the module docstring


def test_bug_patch_then_gold_patch_restores_the_file_byte_for_byte(tmp_path: pathlib.Path):
    target = tmp_path / "pkg" / "mod.py"
    target.parent.mkdir()
    for m in _all()[::5]:
        target.write_text(SOURCE)
        for patch, expect in ((m.bug_patch(), m.mutated()), (m.gold_patch(), SOURCE)):
            (tmp_path / "p.diff").write_text(patch)
            subprocess.run(["git", "apply", "p.diff"], cwd=tmp_path, check=True, capture_output=True)
            assert target.read_text() == expect


def test_no_trailing_newline_still_round_trips():
    text = "def f(a, b):\n    return a < b"
    m = next(x for x in mutations.file_mutations("f.py", text) if x.kind == "wrong_comparison")
    assert m.mutated() == "def f(a, b):\n    return a <= b"
    assert "\\ No newline at end of file" in m.bug_patch()


def test_order_is_deterministic_given_the_seed_and_pairs_join_two_functions():
    one = [m.key for m in mutations.candidates(_all(), seed=3, pairs=2)]
    assert one == [m.key for m in mutations.candidates(list(reversed(_all())), seed=3, pairs=2)]
    assert one != [m.key for m in mutations.candidates(_all(), seed=4, pairs=2)]
    pairs = [m for m in mutations.candidates(_all(), seed=3, pairs=2) if m.kind == mutations.PAIR]
    assert len(pairs) == 2
    for p in pairs:
        assert len({part.function for part in p.parts}) == 2
        assert p.mutated() == mutations.apply_edits(p.parts[1].mutated(), p.parts[0].edits)


def test_exercised_filter_and_unparsable_files():
    assert {m.function for m in mutations.file_mutations("m.py", SOURCE, {"total"}.__contains__)} == {"Bag.total"}
    assert mutations.file_mutations("m.py", "def broken(:\n") == []


def test_a_stale_edit_is_refused():
    m = _all()[0]
    with pytest.raises(ValueError, match="expected"):
        mutations.apply_edits("x" * len(SOURCE), m.edits)


def test_unchecked_mutations_are_the_checked_ones_once_validity_is_asked():
    unchecked = mutations.file_mutations("pkg/mod.py", SOURCE, check=False)
    assert [m.key for m in unchecked if m.valid()] == [m.key for m in _all()]


def test_the_order_spreads_files_and_pairs_come_early():
    other = mutations.file_mutations("pkg/other.py", SOURCE.replace("clamp", "clip"))
    order = mutations.candidates(_all() + other, seed=0, pairs=3)
    assert {m.file for m in order[:4]} == {"pkg/mod.py", "pkg/other.py"}
    assert any(m.kind == mutations.PAIR for m in order[:mutations.PAIR_EVERY + 1])
