"""Controlled edits of a gold SWE-RL answer, to measure how the reward reacts to edit distance.

`perturb_answer` applies k random character or line edits (insert, delete, substitute) inside one region
of every SEARCH/REPLACE block of an answer; `levenshtein` measures the resulting edit distance exactly
(k edits can cancel, so the distance is at most k); `edit_curve` scores perturbed gold answers of PR
records with the real reward functions.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence

from swerl_jax.answer import SEARCH_REPLACE_REGEX
from swerl_jax.data.targets import oracle_solution
from swerl_jax.reward import get_reward_fn

_BLOCK = re.compile(SEARCH_REPLACE_REGEX)
REGIONS = {"search": 2, "replace": 3}
UNITS = ("char", "line")
_ALPHABET = string.ascii_letters + string.digits + " _()[]=.,:+-*\"'"


def levenshtein(a: Sequence, b: Sequence, max_dist: int | None = None) -> int:
    """Edit distance (unit-cost insert/delete/substitute) between two sequences (strings or lists of lines).

    With `max_dist`, only the diagonal band of width 2*max_dist+1 is computed (O(len * max_dist)) and any
    distance above it is returned as max_dist + 1.
    """
    # A shared prefix/suffix never changes the distance; stripping it makes sparse edits cheap.
    lo = 0
    while lo < len(a) and lo < len(b) and a[lo] == b[lo]:
        lo += 1
    hi_a, hi_b = len(a), len(b)
    while hi_a > lo and hi_b > lo and a[hi_a - 1] == b[hi_b - 1]:
        hi_a, hi_b = hi_a - 1, hi_b - 1
    a, b = a[lo:hi_a], b[lo:hi_b]
    n, m = len(a), len(b)
    bound = max(n, m) if max_dist is None else max_dist
    if abs(n - m) > bound:
        return bound + 1
    inf = bound + 1
    prev = [j if j <= bound else inf for j in range(m + 1)]
    for i in range(1, n + 1):
        cur = [inf] * (m + 1)
        if i <= bound:
            cur[0] = i
        j_lo, j_hi = max(1, i - bound), min(m, i + bound)
        best = cur[0]
        for j in range(j_lo, j_hi + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            value = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            cur[j] = value if value < inf else inf
            best = min(best, cur[j])
        if best >= inf:
            return inf
        prev = cur
    return min(prev[m], inf)


def _edit_units(units: list[str], k: int, rng: random.Random, unit: str) -> list[str]:
    """`units` (characters or lines) after k random insert/delete/substitute operations."""
    units = list(units)
    for _ in range(k):
        op = rng.choice(("insert", "delete", "substitute")) if units else "insert"
        pos = rng.randrange(len(units) + (1 if op == "insert" else 0))
        if unit == "char":
            new = rng.choice(_ALPHABET)
        else:
            # A plausible code line: a copy of another line of the region with one token changed.
            base = rng.choice(units) if units else ""
            new = base + "  # " + "".join(rng.choice(string.ascii_lowercase) for _ in range(4))
        if op == "insert":
            units.insert(pos, new)
        elif op == "delete":
            del units[pos]
        else:
            units[pos] = new if new != units[pos] else new + "x"
    return units


def _split(text: str, unit: str) -> list[str]:
    return list(text) if unit == "char" else text.split("\n")


def _join(units: list[str], unit: str) -> str:
    return "".join(units) if unit == "char" else "\n".join(units)


def perturb_answer(
    answer: str, k: int, rng: random.Random, unit: str = "char", region: str = "replace"
) -> tuple[str, int]:
    """A copy of `answer` with k random `unit` edits spread over the `region` text of its edit blocks.

    Returns (perturbed answer, exact edit distance in `unit`s between the old and new region texts, summed
    over blocks). Raises ValueError for an unknown unit/region, a negative k or an answer without blocks.
    """
    if unit not in UNITS:
        raise ValueError(f"unit={unit!r}: choose one of {UNITS}")
    if region not in REGIONS:
        raise ValueError(f"region={region!r}: choose one of {sorted(REGIONS)}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    group = REGIONS[region]
    spans = [m.span(group) for m in _BLOCK.finditer(answer)]
    if not spans:
        raise ValueError("answer has no SEARCH/REPLACE block to edit")
    texts = [answer[s:e] for s, e in spans]
    # Spread the k edits over blocks in proportion to their size (each block gets at least a chance).
    weights = [max(1, len(_split(t, unit))) for t in texts]
    counts = [0] * len(texts)
    for _ in range(k):
        counts[rng.choices(range(len(texts)), weights=weights)[0]] += 1
    out, last, distance = [], 0, 0
    for (s, e), text, count in zip(spans, texts, counts, strict=True):
        old_units = _split(text, unit)
        new_units = _edit_units(old_units, count, rng, unit)
        distance += levenshtein(old_units, new_units, max_dist=count)
        out.append(answer[last:s])
        out.append(_join(new_units, unit))
        last = e
    out.append(answer[last:])
    return "".join(out), distance


def edit_curve(
    records: list[dict],
    ks: Sequence[int],
    repeats: int = 2,
    unit: str = "char",
    region: str = "replace",
    seed: int = 0,
    kinds: Sequence[str] = ("continuous", "discrete"),
) -> list[dict]:
    """Reward of k-edit perturbations of each record's gold answer, for every k in `ks`.

    One row per (record, k, repeat): instance_id, k, repeat, distance (exact, in `unit`s), one column per
    reward kind, format_error (the continuous reward's reason or None). Records whose change SEARCH/REPLACE
    cannot express (a new file) are skipped.
    """
    rng = random.Random(seed)
    fns = {kind: get_reward_fn(kind) for kind in kinds}
    rows = []
    for record in records:
        try:
            gold = oracle_solution(record)
        except ValueError:
            continue
        for k in ks:
            for rep in range(repeats if k > 0 else 1):
                answer, distance = perturb_answer(gold, k, rng, unit=unit, region=region)
                row = {"instance_id": record["instance_id"], "k": k, "repeat": rep, "distance": distance}
                for kind, fn in fns.items():
                    reward, info = fn(record["code_context"], record["oracle_new_content"], answer)
                    row[kind] = reward
                    if kind == kinds[0]:
                        row["format_error"] = info.get("reason") if reward < 0 else None
                rows.append(row)
    return rows
