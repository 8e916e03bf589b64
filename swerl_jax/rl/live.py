"""What a GRPO step is doing, live, for the progress bar (issue 57 item 7: SmolLM2's first step took 6m22s with the
bar at `0/2` the whole time).

A step's stages are reported as they start (`collect_rollouts`: each sampler request and the rewards scored so far;
the trainer: log-probs, the update, publishing, evaluation). While a sampler request is in flight, `watching`
asks the sampler what its engine is doing (`activity()`: `SamplingEngine.activity` in this process or, through a
connection of its own, in the sampler's) every `poll_s` and reports it: a program being compiled (a first call of
a shape, minutes on CPU for a 135M model), prompts done and tokens generated so far (the host sees them per chunk of
`sampler.max_batch` rows: decoding runs inside one XLA loop).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

Report = Callable[[str], None]


def describe(activity: dict) -> str:
    """The sampler's activity in a few words ("" when it says nothing)."""
    if not activity:
        return ""
    parts = []
    if activity.get("prompts"):
        parts.append(f"{activity.get('prompts_done', 0)}/{activity['prompts']} prompts, "
                     f"{activity.get('tokens', 0)} tokens")
    if activity.get("compiling"):
        parts.append(f"compiling {activity['compiling']} (a new shape; then it runs)")
    return "; ".join(parts)


@contextlib.contextmanager
def watching(sampler: Any, report: Report | None, what: str, poll_s: float = 2.0) -> Iterator[None]:
    """Report `what` now, then `what: <the sampler's activity> (elapsed)` every `poll_s` until the block ends. No
    thread without `report` or where the sampler has no `activity()`."""
    if report is None:
        yield
        return
    report(what)
    ask = getattr(sampler, "activity", None)
    if ask is None:
        yield
        return
    stop = threading.Event()
    start = time.monotonic()

    def poll() -> None:
        while not stop.wait(poll_s):
            try:
                said = describe(ask())
            except Exception:  # noqa: BLE001 - progress never fails the step
                said = ""
            report(f"{what}: {said} ({time.monotonic() - start:.0f}s)" if said else
                   f"{what} ({time.monotonic() - start:.0f}s)")

    thread = threading.Thread(target=poll, name="generation-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
