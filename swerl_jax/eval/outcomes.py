"""What became of every instance an evaluation was asked about, SWE-bench's way: the rate is resolved over all of
them, and an instance with no prediction, an empty patch or an error counts as unresolved (issue 46 item 1: the
rate over the predictions alone rewarded a model for the instances it failed before a patch)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Each instance asked about has exactly one outcome; the counts of a report sum to the instances asked about.
OUTCOMES = ("resolved", "unresolved", "empty_patch", "error", "no_prediction")
GRADED = ("resolved", "unresolved", "tampered")
# An instance this machine cannot grade (reach.py: no clone, no interpreter, compiler or network): counted apart,
# in no outcome above and not in the rate's denominator (issue 49 item 3), since no patch could change it.
OUT_OF_REACH = "out_of_reach"


def outcome(result: Mapping) -> str:
    """The outcome of one graded result (the harness's per-instance entry): resolved, else an empty patch (the
    model's failure, whatever the grading made of it), else an error (a status other than graded), else unresolved."""
    if result.get("resolved"):
        return "resolved"
    if result.get("status") == OUT_OF_REACH:
        return OUT_OF_REACH
    if result.get("empty_patch"):
        return "empty_patch"
    # tampered: the trusted plugin saw the test machinery change (the patch's doing, graded as unresolved)
    return "unresolved" if result.get("status") in ("unresolved", "tampered") else "error"


def outcome_counts(asked: Iterable[str], results: Mapping[str, Mapping], pending: Iterable[str] = ()
                   ) -> tuple[dict[str, int], dict[str, list[str]]]:
    """({outcome: count}, {outcome: sorted ids}) over every id in `asked`: an id without a result is
    `no_prediction`, or `pending` when an interrupted run had its prediction but did not grade it."""
    waiting = set(pending)
    ids: dict[str, list[str]] = {k: [] for k in (*OUTCOMES, *(["pending"] if waiting else []), OUT_OF_REACH)}
    for iid in sorted(set(asked)):
        if iid in results:
            ids[outcome(results[iid])].append(iid)
        else:
            ids["pending" if iid in waiting else "no_prediction"].append(iid)
    if not ids[OUT_OF_REACH]:  # listed only when there is one: reports without any keep their shape
        del ids[OUT_OF_REACH]
    return {k: len(v) for k, v in ids.items()}, ids


def rate_line(counts: Mapping[str, int]) -> str:
    """`resolved N/M (unresolved .., empty patch .., error .., no prediction ..)`, M every instance asked about but
    those out of reach (counted after a `;`)."""
    far = counts.get(OUT_OF_REACH, 0)
    total = sum(counts.values()) - far
    rest = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items() if k not in ("resolved", OUT_OF_REACH))
    apart = f"; out of reach {far}, not counted" if far else ""
    return f"resolved {counts.get('resolved', 0)}/{total} ({rest}{apart})"


def resolved_rate(counts: Mapping[str, int]) -> float | None:
    """Resolved over every instance asked about but those out of reach; None when there is none (no number)."""
    total = sum(counts.values()) - counts.get(OUT_OF_REACH, 0)
    return counts.get("resolved", 0) / total if total else None
