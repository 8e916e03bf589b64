"""Reranking the samples of one instance: regression tests, reproduction tests, then majority vote.

As the release's `rerank.py`: samples with an empty normalized patch are out. Four filters are formed:
regression (the samples with the fewest failing regression tests), reproduction (the largest consensus set: samples
grouped by the set T of reproduction tests they pass, the groups with the highest |T|^2 x |P| kept),
regression-then-reproduction and reproduction-then-regression; the first of those (in that order) that keeps some
but not all samples is used, else all of them. Among the kept samples the normalized patch with the most votes
wins, ties to the one that appeared first; the winner's own patch (not the normalized one) is the prediction.
A sample without regression results counts 10,000 failures, as in the release.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

NO_REGRESSION_RESULT = 10_000


@dataclasses.dataclass(frozen=True)
class Sample:
    """One repair sample as the reranker sees it."""

    patch: str
    normalized: str
    regression_failures: int = 0  # failing regression tests (NO_REGRESSION_RESULT when not run)
    reproduction_passed: frozenset[str] = frozenset()  # ids of the reproduction tests this patch resolves


def by_regression(samples: list[Sample], ids: list[int]) -> list[int]:
    """The ids with the fewest regression failures."""
    if not ids:
        return ids
    best = min(samples[i].regression_failures for i in ids)
    return [i for i in ids if samples[i].regression_failures == best]


def by_reproduction(samples: list[Sample], ids: list[int]) -> list[int]:
    """The ids in the consensus groups with the highest |tests|^2 x |patches|."""
    if not ids:
        return ids
    groups: dict[frozenset[str], list[int]] = {}
    for i in ids:
        groups.setdefault(samples[i].reproduction_passed, []).append(i)
    best = max(len(t) * len(t) * len(p) for t, p in groups.items())
    return [i for t, p in groups.items() if len(t) * len(t) * len(p) == best for i in p]


def majority_vote(samples: list[Sample], ids: list[int]) -> int:
    """The id whose normalized patch has the most votes among `ids`, ties to the earliest first appearance."""
    votes: Counter[str] = Counter()
    first: dict[str, int] = {}
    for i in ids:
        key = samples[i].normalized
        votes[key] += 1
        first.setdefault(key, i)
    return max(ids, key=lambda i: (votes[samples[i].normalized], -first[samples[i].normalized]))


def select(samples: list[Sample], use_regression: bool = True, use_reproduction: bool = True) -> int | None:
    """The index of the chosen sample, or None when no sample has a patch."""
    valid = [i for i, s in enumerate(samples) if s.normalized.strip()]
    if not valid:
        return None
    regression = by_regression(samples, valid) if use_regression else valid
    reproduction = by_reproduction(samples, valid) if use_reproduction else valid
    considered = [by_reproduction(samples, regression) if use_reproduction else regression,
                  by_regression(samples, reproduction) if use_regression else reproduction,
                  reproduction, regression]
    considered = [ids for ids in considered if ids and len(ids) != len(valid)]
    return majority_vote(samples, considered[0] if considered else valid)
