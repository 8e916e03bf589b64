"""A progress bar that names the stage it counts: one tqdm line (stderr) through a command's stages.

    bar = StageBar(on=True, desc="repair_score")
    bar.stage("generating", total=40, unit="prompt")   # the bar resets and its description names the stage
    bar.update(8)
    bar.close()

Used by the commands that ran silent for minutes (issue 57 item 7): repair_score, Agentless and curation. Off, it
draws nothing and costs nothing, so library callers (tests, the trainer's evaluator) pass `on=False`.
"""

from __future__ import annotations

import threading
from typing import Any


class StageBar:
    """One tqdm bar whose description is `desc: stage`; nothing at all when `on` is False."""

    def __init__(self, on: bool, desc: str, *, file: Any = None) -> None:
        """`file`: where the bar draws (tqdm's default, stderr, when None)."""
        self.desc = desc
        self._bar = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if on:
            from tqdm import tqdm

            self._bar = tqdm(desc=desc, dynamic_ncols=True, mininterval=0.5, file=file)

    def tick(self, every_s: float = 1.0) -> None:
        """Redraw the bar every `every_s` seconds until `close`, so a stage with nothing to count (a Beam run)
        still shows its elapsed time; only on a terminal (a log file gets a line per stage, not one per second)."""
        if self._bar is None or self._ticker is not None:
            return
        stream = getattr(self._bar.fp, "stream", self._bar.fp)
        if not getattr(stream, "isatty", lambda: False)():
            return

        def run() -> None:
            while not self._stop.wait(every_s):
                bar = self._bar
                if bar is not None:
                    bar.refresh()

        self._ticker = threading.Thread(target=run, name="stage-bar-ticker", daemon=True)
        self._ticker.start()

    @property
    def on(self) -> bool:
        """Whether a bar is drawn."""
        return self._bar is not None

    def stage(self, name: str, total: int | None, unit: str) -> None:
        """Start counting `total` `unit`s of stage `name` (None: a count not known in advance)."""
        if self._bar is not None:
            self._bar.reset(total=total)
            self._bar.unit = unit
            # nothing to count: the stage's name and its elapsed time only (not "0it [00:09, ?it/s]")
            self._bar.bar_format = "{desc} [{elapsed}]" if total is None else None
            self._bar.set_description(f"{self.desc}: {name}", refresh=True)

    def update(self, n: int = 1) -> None:
        """`n` more of the stage's units done."""
        if self._bar is not None:
            self._bar.update(n)

    def note(self, text: str) -> None:
        """A short live note beside the count (e.g. the item being worked on)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=True)

    def write(self, line: str) -> None:
        """A line printed above the bar (or to stdout when off), so it does not garble the bar."""
        if self._bar is not None:
            self._bar.write(line)
        else:
            print(line, flush=True)

    def close(self) -> None:
        """Close the bar (once)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
