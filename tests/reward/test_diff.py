"""cydifflib gives the standard library's diffs and ratios, bit for bit."""

import difflib
import random
import struct

import cydifflib

from swerl_jax.reward.diff import BACKEND, generate_unified_diff, similarity


def _random_code(rng: random.Random) -> str:
    words = ["def", "return", "x", "y", "(", ")", ":", " ", "\n", "    ", "if", "=", "1", "# c", "é", "\t"]
    return "".join(rng.choice(words) for _ in range(rng.randint(0, 200)))


def test_backend_is_cydifflib():
    assert BACKEND == "cydifflib"


def test_ratios_bitwise_equal_on_random_pairs():
    rng = random.Random(0)
    for _ in range(1500):
        a, b = _random_code(rng), _random_code(rng)
        if rng.random() < 0.5:  # related pairs, like a prediction near the oracle
            b = a[: rng.randint(0, len(a))] + _random_code(rng)[:20] + a[rng.randint(0, len(a)) :]
        if not a or not b:
            continue
        ours = similarity(a, b)
        ref = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
        assert struct.pack("<d", ours) == struct.pack("<d", ref), (a, b)


def test_unified_diffs_equal_on_random_pairs():
    rng = random.Random(1)
    for _ in range(500):
        a = _random_code(rng)
        lines = a.split("\n")
        rng.shuffle(lines[: rng.randint(0, len(lines))])
        b = "\n".join(lines) + _random_code(rng)[:30]
        assert generate_unified_diff(a, b) == generate_unified_diff(a, b, lib=difflib)
        ref = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "old", "new", lineterm="", n=3))
        assert generate_unified_diff(a, b, lib=cydifflib) == "\n".join(ref[2:])


def test_empty_side_scores_zero():
    assert similarity("", "x") == 0.0 and similarity("x", "") == 0.0
