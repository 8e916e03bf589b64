"""What became of every instance an evaluation was asked about, SWE-bench's way: the rate is resolved over all of
them, and an instance with no prediction, an empty patch or an error counts as unresolved (issue 46 item 1: the
rate over the predictions alone rewarded a model for the instances it failed before a patch)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Each instance asked about has exactly one outcome; the counts of a report sum to the instances asked about.
OUTCOMES = ("resolved", "unresolved", "empty_patch", "error", "no_prediction")
GRADED = ("resolved", "unresolved")


def outcome(result: Mapping) -> str:
    """The outcome of one graded result (the harness's per-instance entry): resolved, else an empty patch (the
    model's failure, whatever the grading made of it), else an error (a status other than graded), else unresolved."""
    if result.get("resolved"):
        return "resolved"
    if result.get("empty_patch"):
        return "empty_patch"
    return "unresolved" if result.get("status") == "unresolved" else "error"


def outcome_counts(asked: Iterable[str], results: Mapping[str, Mapping], pending: Iterable[str] = ()
                   ) -> tuple[dict[str, int], dict[str, list[str]]]:
    """({outcome: count}, {outcome: sorted ids}) over every id in `asked`: an id without a result is
    `no_prediction`, or `pending` when an interrupted run had its prediction but did not grade it."""
    waiting = set(pending)
    ids: dict[str, list[str]] = {k: [] for k in (*OUTCOMES, *(["pending"] if waiting else []))}
    for iid in sorted(set(asked)):
        if iid in results:
            ids[outcome(results[iid])].append(iid)
        else:
            ids["pending" if iid in waiting else "no_prediction"].append(iid)
    return {k: len(v) for k, v in ids.items()}, ids


def rate_line(counts: Mapping[str, int]) -> str:
    """`resolved N/M (unresolved .., empty patch .., error .., no prediction ..)`, M every instance asked about."""
    total = sum(counts.values())
    rest = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items() if k != "resolved")
    return f"resolved {counts.get('resolved', 0)}/{total} ({rest})"


def resolved_rate(counts: Mapping[str, int]) -> float | None:
    """Resolved over every instance asked about; None when none was asked (no number to report)."""
    total = sum(counts.values())
    return counts.get("resolved", 0) / total if total else None
