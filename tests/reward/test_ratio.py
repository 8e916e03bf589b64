"""The near-linear similarity and the shared-line splitting give difflib's results, bit for bit."""

import difflib
import json
import random
import struct

import pytest

from swerl_jax.reward import ratio as ratio_module
from swerl_jax.reward.diff import SplitText, diff_against, edited_lines, generate_unified_diff
from swerl_jax.reward.functions import oracle_patch
from tests.reward.helpers import gold_block

ALPHA = " \n\tabcdefghij+-@()=:_,.01é"


def reference(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _text(rng: random.Random, n: int, alpha: str = ALPHA) -> str:
    return "".join(rng.choice(alpha) for _ in range(n))


def _mutate(rng: random.Random, s: str, edits: int) -> str:
    chars = list(s)
    for _ in range(edits):
        pos, op = rng.randint(0, len(chars)), rng.random()
        if op < 0.4:
            chars[pos:pos] = _text(rng, rng.randint(1, 60))
        elif op < 0.7:
            del chars[pos:pos + rng.randint(1, 60)]
        else:  # copy a chunk elsewhere: repeated runs, ties between candidate matches
            start = rng.randint(0, max(0, len(chars) - 1))
            chars[pos:pos] = chars[start:start + rng.randint(1, 200)]
    return "".join(chars)


@pytest.fixture
def spy(monkeypatch):
    """Counts how often the sampled longest-match finder answered (the fast path) and gave up."""
    counts = {"found": 0, "gave_up": 0}
    inner = ratio_module._longest_match

    def counting(*args):
        out = inner(*args)
        counts["found" if out is not None else "gave_up"] += 1
        return out

    monkeypatch.setattr(ratio_module, "_longest_match", counting)
    return counts


def test_near_identical_long_pairs_take_the_fast_path(spy):
    rng = random.Random(0)
    for _ in range(80):
        a = _text(rng, rng.randint(300, 2500))
        b = _mutate(rng, a, rng.randint(0, 6))
        assert bits(ratio_module.ratio(a, b)) == bits(reference(a, b)), (a, b)
    assert spy["found"] > 150


def test_unrelated_repetitive_and_tied_pairs(spy):
    rng = random.Random(1)
    for _ in range(70):
        kind = rng.randrange(4)
        if kind == 0:  # unrelated: no long run, the compiled matcher decides
            a, b = _text(rng, rng.randint(0, 800)), _text(rng, rng.randint(0, 800))
        elif kind == 1:  # one unit repeated: grams occur everywhere (the budget gives up)
            unit = _text(rng, rng.randint(1, 40), ALPHA[: rng.randint(1, len(ALPHA))])
            base = unit * rng.randint(5, 60)
            a, b = _mutate(rng, base, rng.randint(0, 3)), _mutate(rng, base, rng.randint(0, 3))
        elif kind == 2:  # several equally long candidates: the earliest in a, then in b, must win
            x, y, z = _text(rng, rng.randint(40, 150)), _text(rng, 30), _text(rng, 30)
            parts = [x, x[:-1], x[1:], y, z]
            a = "".join(rng.choice(parts) for _ in range(rng.randint(1, 7)))
            b = "".join(rng.choice(parts) for _ in range(rng.randint(1, 7)))
        else:  # two-letter alphabet
            a = _text(rng, rng.randint(100, 1200), "ab")
            b = _mutate(rng, a, 2).replace("é", "a")
        assert bits(ratio_module.ratio(a, b)) == bits(reference(a, b)), (a, b)
    assert spy["found"] > 0 and spy["gave_up"] > 0


@pytest.mark.parametrize("extra", [-2, -1, 0, 1, 2])
def test_runs_at_the_sampling_threshold(extra):
    # Two swapped runs of about _T characters in filler: whether they are sampled decides the path.
    rng = random.Random(extra)
    for _ in range(20):
        x, y = _text(rng, ratio_module._T + extra), _text(rng, ratio_module._T + extra)
        a = _text(rng, rng.randint(0, 300), "xyz") + x + _text(rng, rng.randint(0, 300), "xyz") + y
        b = _text(rng, rng.randint(0, 300), "xyz") + y + _text(rng, rng.randint(0, 300), "xyz") + x
        assert bits(ratio_module.ratio(a, b)) == bits(reference(a, b))


def test_matching_total_equals_the_blocks():
    rng = random.Random(3)
    for _ in range(40):
        a = _text(rng, rng.randint(200, 1500))
        b = _mutate(rng, a, 4)
        blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        assert ratio_module.matching_total(a, b) == sum(m.size for m in blocks)
    assert ratio_module.ratio("", "") == 1.0 == reference("", "")
    assert ratio_module.ratio("abc", "abc") == 1.0


def test_real_diff_pairs(shared_data):
    # Predicted diffs of mutated gold edits vs the oracle's diff, as the reward computes them.
    rng = random.Random(4)
    for line in open(shared_data / "pr_records_requests_flask.jsonl"):
        rec = json.loads(line)
        ctx, oracle = rec["code_context"], rec["oracle_new_content"]
        oracle_diff = oracle_patch(ctx, oracle)
        for path, new in oracle.items():
            if path not in oracle_diff:
                continue
            _, search, replace = gold_block(ctx[path], new, path)
            for _ in range(3):
                lines = replace.split("\n")
                lines.insert(rng.randint(0, len(lines)), "    value = None  # mutated")
                pred = ("\n" + ctx[path]).replace("\n" + search, "\n" + "\n".join(lines))[1:]
                pred_diff = generate_unified_diff(ctx[path], pred)
                assert bits(ratio_module.ratio(pred_diff, oracle_diff[path])) == bits(
                    reference(pred_diff, oracle_diff[path]))


BREAKS = ["a", "bc", "x = 1", "\n", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", " ", "\n\n"]


def test_edited_lines_equal_splitlines_with_every_line_break():
    rng = random.Random(5)
    for _ in range(20_000):
        old = "".join(rng.choice(BREAKS) for _ in range(rng.randint(0, 25)))
        if rng.random() < 0.3:
            new = "".join(rng.choice(BREAKS) for _ in range(rng.randint(0, 25)))
        else:  # an edit of old: the common prefix and suffix are reused
            i = rng.randint(0, len(old))
            j = rng.randint(i, len(old))
            new = old[:i] + "".join(rng.choice(BREAKS) for _ in range(rng.randint(0, 4))) + old[j:]
        base = SplitText(old)
        assert edited_lines(base, new) == new.splitlines(), (old, new)
        assert diff_against(base, new) == generate_unified_diff(old, new), (old, new)


def test_runs_shorter_than_the_first_sampling_take_the_second_pass(monkeypatch):
    # Common runs of _KNOWN.._T chars among unrelated filler: the first pass may catch one without proving
    # it longest; the denser second pass must then give difflib's answer.
    passes = []
    inner = ratio_module._sampled_runs

    def counting(a, b, alo, ahi, blo, bhi, q, s, *budget):
        passes.append(q)
        return inner(a, b, alo, ahi, blo, bhi, q, s, *budget)

    monkeypatch.setattr(ratio_module, "_sampled_runs", counting)
    rng = random.Random(6)
    for _ in range(30):
        runs = [_text(rng, rng.randint(ratio_module._KNOWN, ratio_module._T - 1)) for _ in range(4)]
        a = "".join(_text(rng, rng.randint(20, 200), "xyz") + r for r in runs)
        b = "".join(_text(rng, rng.randint(20, 200), "uvw") + r for r in rng.sample(runs, len(runs)))
        assert bits(ratio_module.ratio(a, b)) == bits(reference(a, b))
    assert any(q < ratio_module._Q for q in passes)


@pytest.fixture
def coarse_spy(monkeypatch):
    """Counts the matches the sparse samplings (_coarse_match) decided."""
    counts = {"decided": 0}
    inner = ratio_module._coarse_match

    def counting(*args):
        out = inner(*args)
        counts["decided"] += out is not None
        return out

    monkeypatch.setattr(ratio_module, "_coarse_match", counting)
    return counts


def test_sparse_samplings_give_difflibs_bits_on_every_kind_of_pair(monkeypatch, coarse_spy):
    # Every piece the sampler sees tries the sparse samplings first (normally only pieces of >= _COARSE
    # cells do): near-identical, repetitive, tied and run-threshold pairs must keep difflib's bits.
    monkeypatch.setattr(ratio_module, "_COARSE", 0)
    rng = random.Random(7)
    for k in range(120):
        kind = k % 4
        if kind == 0:
            a = _text(rng, rng.randint(300, 3000))
            b = _mutate(rng, a, rng.randint(0, 8))
        elif kind == 1:  # a repeated unit: grams occur everywhere
            unit = _text(rng, rng.randint(1, 40), ALPHA[: rng.randint(1, len(ALPHA))])
            base = unit * (rng.randint(300, 3000) // len(unit) + 1)
            a, b = _mutate(rng, base, rng.randint(0, 4)), _mutate(rng, base, rng.randint(0, 4))
        elif kind == 2:  # equally long candidates: the earliest in a, then in b, must win
            x = _text(rng, rng.randint(70, 400))
            parts = [x, x[:-1], x[1:], _text(rng, 40), _text(rng, 40)]
            a = "".join(rng.choice(parts) for _ in range(rng.randint(1, 9)))
            b = "".join(rng.choice(parts) for _ in range(rng.randint(1, 9)))
        else:  # swapped runs just around a sparse sampling's threshold
            size = rng.choice([ratio_module._T - 1, ratio_module._T, ratio_module._T + 1, 200, 201, 500])
            x, y = _text(rng, size), _text(rng, size)
            a = _text(rng, rng.randint(0, 900), "xyz") + x + _text(rng, rng.randint(0, 900), "xyz") + y
            b = _text(rng, rng.randint(0, 900), "xyz") + y + _text(rng, rng.randint(0, 900), "xyz") + x
        assert bits(ratio_module.ratio(a, b)) == bits(reference(a, b)), (a, b)
    assert coarse_spy["decided"] > 80


def test_whole_file_diffs_of_repetitive_lines(coarse_spy):
    # Every line of a repetitive file is popular for the line diff (autojunk), so a one-line change rewrites
    # the whole file in both diffs; their similarity is decided by sparse samplings instead of the compiled
    # matcher's quadratic time (4,000 lines: 34.6 s before, see BENCHMARKS.md). cydifflib gives difflib's bits.
    import cydifflib

    lines = [f"    v{i % 7} = f(v{i % 5})" for i in range(600)]
    old = "\n".join(lines) + "\n"
    oracle, pred = lines.copy(), lines.copy()
    oracle[200] = "    changed = 1"
    pred[400], pred[150] = "    other = 2", "    third = 3"
    oracle_diff = generate_unified_diff(old, "\n".join(oracle) + "\n")
    pred_diff = generate_unified_diff(old, "\n".join(pred) + "\n")
    assert oracle_diff.count("\n-") >= 300 and pred_diff.count("\n-") >= 300  # most of the file, twice
    want = cydifflib.SequenceMatcher(None, pred_diff, oracle_diff, autojunk=False).ratio()
    assert bits(ratio_module.ratio(pred_diff, oracle_diff)) == bits(want)
    assert coarse_spy["decided"] > 0
