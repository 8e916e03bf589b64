"""Beam's INFO lines out of curation's output, its warnings and errors kept (issue 57 item 7: 36 of 62 lines).

Beam's multi-processing workers are `python -m apache_beam.runners.worker.sdk_worker_main` subprocesses that set
their own root logger to INFO before they read any pipeline option, and the FnApiRunner gives them no options
(`--default_sdk_harness_log_level` never reaches them), so their INFO lines cannot be turned off inside them. They
write to the stderr they inherit: `info_filtered_stderr` points file descriptor 2 at a pipe for the pipeline's
run and copies every line but the INFO ones (Python logging's `INFO:name:...` and absl/glog's `I1207 01:23:45...`)
to the real stderr. A line that is not INFO (warnings, errors, tracebacks, anything else) passes unchanged.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator

INFO_LINE = re.compile(rb"^(?:INFO:|I\d{4} \d\d:\d\d:\d\d)")


def is_info(line: bytes) -> bool:
    """Whether `line` is an INFO log line (Python logging's default format or absl/glog's)."""
    return INFO_LINE.match(line) is not None


@contextlib.contextmanager
def info_filtered_stderr(on: bool = True) -> Iterator[int]:
    """While open, file descriptor 2 (this process's and its children's stderr) drops INFO lines; yields a
    descriptor of the real stderr (for a progress bar, which must not go through the line filter). Off: nothing
    changes and the descriptor is 2 itself."""
    if not on:
        yield 2
        return
    sys.stderr.flush()
    real = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def copy() -> None:
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                if not is_info(line):
                    os.write(real, line)

    thread = threading.Thread(target=copy, name="curate-stderr-filter", daemon=True)
    thread.start()
    try:
        yield real
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # the pipe's last writer here closes; children that outlive the run keep it open
        thread.join(timeout=5.0)
        if not thread.is_alive():  # else a worker still holds the pipe: the copy keeps writing to `real`
            os.close(real)
