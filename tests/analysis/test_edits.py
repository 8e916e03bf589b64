"""Controlled edits: exact Levenshtein (vs a plain full-table DP), perturbation invariants, the edit curve."""

import random
import re

import pytest

from swerl_jax.analysis.edits import edit_curve, levenshtein, perturb_answer
from swerl_jax.answer import SEARCH_REPLACE_REGEX
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution


def _reference_levenshtein(a, b):
    """Textbook Wagner-Fischer over the full table (no band, no prefix stripping)."""
    table = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1,
                              table[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return table[-1][-1]


def test_levenshtein_hand_values():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
    assert levenshtein("abc", "abc") == 0
    assert levenshtein(["a", "b", "c"], ["a", "c"]) == 1


def test_levenshtein_matches_reference_dp_and_band():
    rng = random.Random(0)
    for _ in range(200):
        a = "".join(rng.choice("abc") for _ in range(rng.randrange(0, 14)))
        b = "".join(rng.choice("abc") for _ in range(rng.randrange(0, 14)))
        d = _reference_levenshtein(a, b)
        assert levenshtein(a, b) == d
        for bound in range(0, 6):
            # Within the band the exact value, beyond it bound + 1.
            assert levenshtein(a, b, max_dist=bound) == (d if d <= bound else bound + 1)


@pytest.fixture(scope="module")
def record_and_gold():
    record = synthetic_records(1, seed=3)[0]
    return record, oracle_solution(record)


@pytest.mark.parametrize("unit", ["char", "line"])
def test_perturb_distance_is_exact_and_at_most_k(record_and_gold, unit):
    _, gold = record_and_gold
    rng = random.Random(1)
    for k in (0, 1, 3, 10):
        answer, distance = perturb_answer(gold, k, rng, unit=unit)
        assert distance <= k
        old = [m.group(3) for m in re.finditer(SEARCH_REPLACE_REGEX, gold)]
        new = [m.group(3) for m in re.finditer(SEARCH_REPLACE_REGEX, answer)]
        split = list if unit == "char" else (lambda t: t.split("\n"))
        assert distance == sum(_reference_levenshtein(split(o), split(n)) for o, n in zip(old, new, strict=True))
        # Only the REPLACE text changes: every SEARCH text and the thought are as in the gold answer.
        assert [m.group(2) for m in re.finditer(SEARCH_REPLACE_REGEX, answer)] == \
            [m.group(2) for m in re.finditer(SEARCH_REPLACE_REGEX, gold)]
        assert answer.split("<solution>")[0] == gold.split("<solution>")[0]
        if k == 0:
            assert answer == gold


def test_perturb_errors(record_and_gold):
    _, gold = record_and_gold
    rng = random.Random(0)
    with pytest.raises(ValueError, match="unit='word'"):
        perturb_answer(gold, 1, rng, unit="word")
    with pytest.raises(ValueError, match="region='thought'"):
        perturb_answer(gold, 1, rng, region="thought")
    with pytest.raises(ValueError, match="k must be >= 0"):
        perturb_answer(gold, -1, rng)
    with pytest.raises(ValueError, match="no SEARCH/REPLACE block"):
        perturb_answer("<think>x</think><solution>nothing</solution>", 1, rng)


def test_search_edits_break_the_answer(record_and_gold):
    record, gold = record_and_gold
    rows = edit_curve([record], ks=[0, 6], repeats=3, region="search", seed=0)
    assert rows[0]["k"] == 0 and rows[0]["continuous"] == 1.0 and rows[0]["format_error"] is None
    broken = [r for r in rows if r["distance"] > 0]
    assert broken and all(r["continuous"] == -1.0 and r["format_error"] == "search_not_found" for r in broken)


def test_edit_curve_rows_and_rewards():
    records = synthetic_records(3, seed=5)
    rows = edit_curve(records, ks=[0, 2, 20], repeats=2, seed=1)
    # k = 0 is not repeated (it is deterministic): 3 records x (1 + 2 + 2) rows.
    assert len(rows) == 15
    for r in rows:
        if r["distance"] == 0:
            assert r["continuous"] == 1.0 and r["discrete"] == 1.0
        elif r["format_error"] is None:
            # A changed replacement changes the file, so it is never an exact match; similarity stays below 1.
            assert r["discrete"] == 0.0 and 0.0 <= r["continuous"] < 1.0
    mean = {k: sum(r["continuous"] for r in rows if r["k"] == k) / sum(r["k"] == k for r in rows) for k in (0, 20)}
    assert mean[20] < mean[0]
