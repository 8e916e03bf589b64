"""``SequenceMatcher(None, a, b, autojunk=False).ratio()`` of two strings, to the last bit, in near-linear time.

The reward compares a predicted diff with the oracle's character by character. difflib's matcher is
quadratic there: every ``find_longest_match`` walks all of ``a`` against the index of ``b`` (cydifflib also
clears a ``len(b)`` array per character of ``a``), 7 ms for two 3 KB diffs. This module computes the same
number from the same recursion, finding each longest match by sampling instead.

Why the result is identical. With no junk function and ``autojunk=False`` nothing is junk or popular, so
``find_longest_match(alo, ahi, blo, bhi)`` returns the longest common substring of ``a[alo:ahi]`` and
``b[blo:bhi]``, the one starting earliest in ``a`` and then earliest in ``b`` (its dynamic programme keeps
the first strict maximum in ``(i, j)`` order; the extension loops cannot grow a maximal run), or size 0.
``get_matching_blocks`` takes that match ``(i, j, k)`` and recurses on both sides, and ``ratio()`` is
``2.0 * M / (len(a) + len(b))`` with ``M`` the total size of the blocks (merging adjacent blocks keeps the
total). So ``M = k + M(left) + M(right)``, whatever order the pieces are solved in and by whatever exact
longest-match finder; here, per piece:

* a piece smaller than ``_SMALL`` cells is handed to the compiled matcher whole (on slices: the matcher
  restricted to a rectangle is the matcher of the two slices, offsets aside);
* otherwise every ``_S``-th position of ``b``'s piece contributes its ``_Q``-character gram, whose
  occurrences in ``a``'s piece (``str.find``) give diagonals, each extended to its maximal run. A common
  substring of length ``L >= _T = _S + _Q - 1`` contains a whole sampled gram (the first sampled position
  at or after its start is at most ``_S - 1`` further on, and its gram ends within ``_T`` characters), so
  every run of length ``>= _T`` is found. If the longest found run is that long it is the longest, and the
  earliest ``(i, j)`` among the found runs of that length is difflib's choice. If it is shorter, say
  ``L``, it is still a real run, so the longest is ``>= L``: a second pass with ``q + s - 1 = L`` finds
  every run that long and decides the same way. A piece with no run of ``_KNOWN`` found (or where repeated
  grams give too many candidates) goes to ``_short_match`` when it has at least ``_GRAMS`` cells (the
  longest match if shorter than ``_SHORT``, exactly, from sets of grams), else to the compiled matcher,
  one level at a time on a matcher its sub-pieces share.
* a piece of at least ``_COARSE`` cells first samples ``b`` sparsely (every ``s`` characters, ``s`` from a
  quarter of the piece down by 4x): a run ``>= s + _Q - 1`` found is the longest, a run ``>= _T`` is settled
  by a pass sized to it, by the same argument. Near-identical repetitive pieces (whole files rewritten in
  both diffs), where the dense pass gives up, are decided from a few grams instead of in quadratic time.
* periodic chains: when the text after a piece's match repeats with the match's period in both strings,
  the next right pieces repeat the same step shifted (``_repeats`` proves it), so the chain is one step
  with a weight. n identical lines, one changed in the prediction and all in the oracle, made ~n/2 such
  steps on ~n-character pieces (2,000 lines: 34 s, now 0.06 s).

Equal strings score 1.0 at once (one block of ``n``: ``2.0 * n / (2 * n)``). tests/reward/test_ratio.py
checks the bits against ``difflib`` on random, near-identical, repetitive and tie-heavy pairs.
"""

from __future__ import annotations

import difflib

try:
    import cydifflib as _lib
except ImportError:  # pragma: no cover - exercised only where cydifflib is absent
    _lib = difflib

_Q = 32  # gram length
_S = 32  # sampling step in b
_T = _S + _Q - 1  # runs at least this long are always found
_SMALL = 20_000  # pieces with fewer cells (len(a) * len(b)) go to the compiled matcher directly
_KNOWN = 12  # a found run this long is worth a second, denser pass
_COARSE = 1 << 26  # pieces with this many cells (8K x 8K characters) try sparse samplings first
_GRAMS = 1 << 22  # pieces with this many cells that sampling left undecided try _short_match
_SHORT = 128  # _short_match decides longest matches shorter than this


def _matcher_total(a: str, b: str) -> int:
    """Total size of the matching blocks, from the compiled matcher."""
    return sum(block[2] for block in _lib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())


def common_run_right(a: str, b: str, i: int, j: int, known: int, limit: int) -> int:
    """Largest n <= limit with a[i:i+n] == b[j:j+n], given that it holds for n = known (galloping: O(log n)
    slice comparisons). Shared with `reward.diff`, which trims common prefixes and suffixes with it."""
    lo, step = known, 64
    while lo < limit:
        hi = min(lo + step, limit)
        if a[i + lo:i + hi] != b[j + lo:j + hi]:
            while lo + 1 < hi:  # a[i:i+lo] matches, a[i:i+hi] does not
                mid = (lo + hi) >> 1
                if a[i + lo:i + mid] == b[j + lo:j + mid]:
                    lo = mid
                else:
                    hi = mid
            return lo
        lo, step = hi, step * 2
    return lo


def common_run_left(a: str, b: str, i: int, j: int, limit: int) -> int:
    """Largest n <= limit with a[i-n:i] == b[j-n:j] (galloping)."""
    lo, step = 0, 64
    while lo < limit:
        hi = min(lo + step, limit)
        if a[i - hi:i - lo] != b[j - hi:j - lo]:
            while lo + 1 < hi:
                mid = (lo + hi) >> 1
                if a[i - mid:i - lo] == b[j - mid:j - lo]:
                    lo = mid
                else:
                    hi = mid
            return lo
        lo, step = hi, step * 2
    return lo


def _sampled_runs(
    a: str, b: str, alo: int, ahi: int, blo: int, bhi: int, q: int, s: int, budget: int | None = None
) -> tuple[int, int, int] | None:
    """The longest run found from grams of q characters sampled every s in b, as (size, i, j), earliest in a
    then in b among the longest found; every run of size >= s + q - 1 is found. None: no gram occurs in
    a, or more than ``budget`` occurrences (repetitive text) so that the compiled matcher is cheaper."""
    run_end: dict[int, int] = {}  # diagonal (j - i) -> end in a of the last run found on it
    best_key: tuple[int, int, int] | None = None  # (-size, i, j): the smallest is difflib's choice
    if budget is None:
        budget = 8 * (ahi - alo + bhi - blo) // s + 64  # gram occurrences examined before giving up
    find = a.find
    for jj in range(blo, bhi - q + 1, s):
        gram = b[jj:jj + q]
        p = find(gram, alo, ahi)
        while p >= 0:
            budget -= 1
            if budget < 0:
                return None
            d = jj - p
            # Grams are visited in increasing jj, so on one diagonal in increasing p: only the last run
            # found there can contain p.
            if p >= run_end.get(d, -1):
                left = common_run_left(a, b, p, jj, min(p - alo, jj - blo))
                right = common_run_right(a, b, p, jj, q, min(ahi - p, bhi - jj))
                start, end = p - left, p + right
                run_end[d] = end
                key = (start - end, start, start + d)
                if best_key is None or key < best_key:
                    best_key = key
            p = find(gram, p + 1, ahi)
    if best_key is None:
        return None
    return -best_key[0], best_key[1], best_key[2]


def _coarse_match(a: str, b: str, alo: int, ahi: int, blo: int, bhi: int) -> tuple[int, int, int] | None:
    """The longest match of a large piece from sparse samplings of b, when it is long; None: undecided.

    Large near-identical pieces of repetitive text (a whole file rewritten in both diffs) have a very long
    match, but their grams occur so often that the dense pass gives up and the compiled matcher takes
    quadratic time. A pass every s finds every run of >= s + _Q - 1: if its longest found run is that long it
    is difflib's choice (the argument of _longest_match); if it is >= _T, a pass every size - _Q + 1 finds
    every run at least that long, which decides. Else the next pass is 4x denser, down to _S.
    """
    budget = 8 * (ahi - alo + bhi - blo) // _S + 64  # what one dense pass may examine
    s = (bhi - blo) // 4
    while s > _S:
        found = _sampled_runs(a, b, alo, ahi, blo, bhi, _Q, s, budget)
        if found is not None and found[0] >= _T:
            if found[0] < s + _Q - 1:
                found = _sampled_runs(a, b, alo, ahi, blo, bhi, _Q, found[0] - _Q + 1, budget)
                if found is None:
                    return None
            return found[1], found[2], found[0]
        s //= 4
    return None


def _longest_match(a: str, b: str, alo: int, ahi: int, blo: int, bhi: int) -> tuple[int, int, int] | None:
    """difflib's ``find_longest_match(alo, ahi, blo, bhi)`` as (i, j, size) when its size is >= _KNOWN;
    None when shorter or unsure.

    Pieces of at least _COARSE cells try sparse samplings first (_coarse_match). A first dense pass samples
    for runs >= _T. If the longest run it found (a real one) is shorter, a second pass samples densely
    enough to find every run at least that long, which makes it exact.
    """
    if (ahi - alo) * (bhi - blo) >= _COARSE:
        found = _coarse_match(a, b, alo, ahi, blo, bhi)
        if found is not None:
            return found
    found = _sampled_runs(a, b, alo, ahi, blo, bhi, _Q, _S)
    if found is None or found[0] < _KNOWN:
        return None
    if found[0] < _T:
        # A real run of found[0]: every run at least that long holds a gram sampled this densely.
        q = (found[0] + 1) // 2
        found = _sampled_runs(a, b, alo, ahi, blo, bhi, q, found[0] - q + 1)
        if found is None:
            return None
    return found[1], found[2], found[0]


def _repeats(a: str, b: str, alo: int, ahi: int, blo: int, bhi: int, da: int, db: int) -> int:
    """How many consecutive right-recursion steps of a piece repeat its first one, shifted (1: none known).

    The piece's match (i, j, k) ends at (alo + da, blo + db), so its right piece is the piece with its starts
    moved by (da, db) and the same ends. Say ``a`` has period ``da`` on ``[alo, alo + pa)`` and ``b`` period
    ``db`` on ``[blo, blo + pb)``. Then, for every t with ``(t+1)*da <= pa`` and ``(t+1)*db <= pb``, step t
    (the piece moved by t times (da, db)) finds the match shifted by (t*da, t*db), with the first left
    piece's text as its left piece: the shifted match is there (periodicity); nothing longer is (the moved
    piece is a sub-rectangle of the piece, whose longest match has size k); and nothing as long starts
    earlier (shifted back by the period, an earlier one in a, or as early in a and earlier in b, would be a
    match of the piece beating (i, j): difflib's choice is the earliest in a, then in b). A file rewritten
    line by line in both diffs (n equal lines, one changed in one diff, all in the other) makes chains of
    ~n such steps on ~n-character pieces: cubic time, done one step per chain here.
    """
    if 2 * da > ahi - alo or 2 * db > bhi - blo:
        return 1
    reps = (da + common_run_right(a, a, alo, alo + da, 0, ahi - alo - da)) // da  # pa // da
    if reps < 2:
        return 1
    return min(reps, (db + common_run_right(b, b, blo, blo + db, 0, bhi - blo - db)) // db)  # and pb // db


def _short_match(a: str, b: str, alo: int, ahi: int, blo: int, bhi: int) -> tuple[int, int, int] | None:
    """difflib's ``find_longest_match(alo, ahi, blo, bhi)`` as (i, j, size) when its size is < _SHORT; None
    when it may be longer.

    For repetitive pieces (sampling gives up on their frequent grams) with a short longest match, where the
    compiled matcher is quadratic: a common substring of length L exists iff a's and b's sets of L-grams
    meet, which is monotone in L, so a binary search finds the longest size; difflib's choice is then the
    first L-gram of a that occurs in b, at its first occurrence in b (earliest in a, then in b). Each test
    hashes every gram of both pieces once (a repetitive piece has few distinct ones).
    """
    def meet(size: int) -> set[str] | None:
        grams = {b[j:j + size] for j in range(blo, bhi - size + 1)}
        return None if grams.isdisjoint(a[i:i + size] for i in range(alo, ahi - size + 1)) else grams

    if meet(_SHORT) is not None:
        return None
    lo, hi = 0, _SHORT  # a common substring of size lo exists, none of size hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meet(mid) is None:
            hi = mid
        else:
            lo = mid
    if lo == 0:
        return alo, blo, 0
    grams = meet(lo)
    i = next(i for i in range(alo, ahi - lo + 1) if a[i:i + lo] in grams)
    return i, b.find(a[i:i + lo], blo, bhi), lo


def matching_total(a: str, b: str) -> int:
    """Total size of ``SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()``.

    difflib's recursion over pieces, each piece's longest match from the sampled finder, else from the
    compiled matcher (one level at a time, on a matcher shared by the piece's sub-pieces as
    ``get_matching_blocks`` shares its own), a small piece from the compiled matcher whole. A periodic piece
    whose right pieces repeat its match (``_repeats``) is solved once with a weight: its match counts that
    many times and its left piece, the same text each time, is solved once with that weight.
    """
    total = 0
    # (alo, ahi, blo, bhi, weight, matcher, its offsets in a and b): weight = copies of this piece's text
    pieces: list[tuple] = [(0, len(a), 0, len(b), 1, None, 0, 0)]
    while pieces:
        alo, ahi, blo, bhi, weight, matcher, oa, ob = pieces.pop()
        if (ahi - alo) * (bhi - blo) < _SMALL:
            total += weight * _matcher_total(a[alo:ahi], b[blo:bhi])
            continue
        found = None if matcher is not None else _longest_match(a, b, alo, ahi, blo, bhi)
        if found is None and matcher is None and (ahi - alo) * (bhi - blo) >= _GRAMS:
            found = _short_match(a, b, alo, ahi, blo, bhi)
        if found is None:  # the compiled matcher decides this piece and its sub-pieces (sampling gave up)
            if matcher is None:
                matcher, oa, ob = _lib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False), alo, blo
            m = matcher.find_longest_match(alo - oa, ahi - oa, blo - ob, bhi - ob)
            found = (m[0] + oa, m[1] + ob, m[2])
        i, j, k = found
        if k == 0:
            continue
        reps = _repeats(a, b, alo, ahi, blo, bhi, i + k - alo, j + k - blo)
        total += weight * reps * k
        if alo < i and blo < j:
            pieces.append((alo, i, blo, j, weight * reps, matcher, oa, ob))
        nalo, nblo = alo + reps * (i + k - alo), blo + reps * (j + k - blo)
        if nalo < ahi and nblo < bhi:
            pieces.append((nalo, ahi, nblo, bhi, weight, matcher, oa, ob))
    return total


def ratio(a: str, b: str) -> float:
    """``SequenceMatcher(None, a, b, autojunk=False).ratio()``, bit for bit."""
    if a == b:
        return 1.0
    length = len(a) + len(b)
    return 2.0 * matching_total(a, b) / length
