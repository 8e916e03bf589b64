"""Unittest verdicts the code under test cannot forge by printing: a trusted driver inside the sandbox and its record.

    inputs = driver_inputs([{"module": "tests.test_x", "expected": ids, "root": repo}], timeout_s=30)
    done = sandbox.run(driver_command(python), work, inputs=inputs, idle_timeout_s=IDLE_S, supervisor=True)
    records = read_records(done.output)                # {task index: record}, only those carrying the run's nonce
    v = verdict(records.get(0), expected=ids)          # Verdict(resolved, passed, failed, status, output)

A grader that reads test output ("Ran 2 tests ... OK", "test_x (...) ... ok") believes whatever the code under test
prints: a module that prints unittest's summary and calls os._exit(0) at import, or a `unittest.py` that shadows the
standard library, used to score as a fix. Here the verdict is a record, not output:

- The driver runs as `python -I -S` (no environment, no site, no script or work dir on sys.path): it imports unittest
  from the standard library before any repository path exists on sys.path, and the repository's root is appended
  after the standard library, so a `unittest.py`, `sitecustomize.py` or `.pth` in the repository is never loaded in
  its place.
- Per task it forks a child that runs the named test module with a result class that records each test id's outcome
  and, only after the whole run finished, writes them to a result pipe (at a random descriptor number) with a
  per-task token, then exits with a per-task random status; a message without both is no message. The child's
  stdout/stderr go to another pipe; they are kept for the log and never parsed. A child that exits early (os._exit),
  is killed, or writes no result has no results: every expected test counts as not run.
- The driver writes one record per task to the sandbox's output after the child is gone and every other process of
  the sandbox is killed: the per-run nonce, the test ids it expected, each test's outcome. The nonce is made by the
  driver (os.urandom) after it made itself non-dumpable and before any code under test runs, announced first, kept
  only in one bytearray that each forked child zeroes at once (so it is in no argv, environment, file or child
  memory); the host takes the first record line as the announcement and ignores every line without its nonce.

- The code under test cannot signal the driver: run with `Sandbox.run(supervisor=True)` (as root), the driver is a
  uid of its own holding only CAP_SETUID, CAP_SETGID and CAP_KILL, and each test child drops to the work dir's uid
  and every capability (checked in /proc) before it cleans the work dir, lays its task out or imports anything.
  Where the host is not root one uid runs all; there the driver's heartbeat (a record every second while a task
  runs) stops when it is stopped or killed, the host kills the sandbox after `IDLE_S` without output, the task
  that was running scores 0 and the batch's others run again in a new sandbox (`testbed/hidden_tests.py`).

- The child loads the test file by path under its own reference (a module under test that swaps
  `sys.modules[name]` mid-import is not what runs), runs only real TestCases of classes defined there whose every
  function is code compiled from that file, and reports nothing if unittest's classes changed during the run. Each
  task is laid out under an unguessable name, and the driver takes back every folder (chmod) before cleaning, so one
  answer cannot fail the next tasks of its batch.

Still possible (see SECURITY.md): code inside the test child can change what it runs in ways these checks do not see
(builtins, tracing, the module under test's own objects) or find the result pipe and token in the runner's frames;
a grader that runs tests in the process of the code it grades cannot rule that out. It cannot reach the driver's
output, forge the nonce, or pass a test that did not run by printing.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shlex
from collections.abc import Sequence

from swerl_jax.sandbox.bwrap import INPUTS_DIR

MARK = "@@swerl-verdict@@ "  # starts the driver's record lines
OUTPUT_HEAD, OUTPUT_TAIL = 4096, 8192  # bytes of a task's test output the driver keeps (first and last)
DRIVER_NAME, SPEC_NAME = "verdict_driver.py", "verdict_tasks.json"
# The driver writes a heartbeat record every BEAT_S while a task runs; the code under test runs as its uid and can
# SIGSTOP or SIGKILL it, so the host runs it with `idle_timeout_s=IDLE_S`: a silent driver is killed within
# seconds (not at the batch's wall clock), the task it was running is charged, and the rest run again.
BEAT_S, IDLE_S = 1.0, 10.0
# The driver, run inside the sandbox by the host's interpreter with -I -S (stdlib only, nothing from the environment).
_DRIVER = (pathlib.Path(__file__).with_name(DRIVER_NAME)).read_text(encoding="utf-8")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A task's verdict from its record: resolved (every expected test id ran and passed), the expected ids that
    passed and the others, a status (resolved | failed: results came, some expected test did not pass | error: the
    test child reported nothing, e.g. an import error or an early exit | timeout | missing: no record with the
    run's nonce) and the test output (for logs only)."""

    resolved: bool
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    status: str
    output: str


def driver_inputs(tasks: Sequence[dict], timeout_s: float) -> dict[str, str]:
    """The sandbox inputs for `driver_command`: the driver and its task list. A task is {"module": dotted test
    module, "expected": [test ids], and "root": the folder to run it in, or "files": {path: text} to lay out in a
    fresh folder of the work dir (the work dir, /tmp and /dev/shm are emptied first)}."""
    spec = {"timeout": timeout_s, "tasks": [{"module": t["module"], "expected": list(t["expected"]),
                                             "root": t.get("root"), "files": t.get("files")} for t in tasks]}
    return {DRIVER_NAME: _DRIVER, SPEC_NAME: json.dumps(spec)}


def driver_command(python: str) -> str:
    """The shell command that runs the driver with `python` (isolated: -I -S) over the inputs of `driver_inputs`."""
    return (f"exec {shlex.quote(python)} -I -S {INPUTS_DIR}/{DRIVER_NAME} {INPUTS_DIR}/{SPEC_NAME} "
            f"{shlex.quote(MARK)} {OUTPUT_HEAD} {OUTPUT_TAIL}")


def read_records(output: str) -> dict[int, dict]:
    """The task records in a sandbox's output: the first record line is the driver's announcement and names the
    nonce; later lines count only with that nonce (one record per task index, the first)."""
    nonce, records = None, {}
    for line in output.split("\n"):  # not splitlines: it also splits at \x1c-\x1e, \x85, ...
        if not line.startswith(MARK):
            continue
        try:
            record = json.loads(line[len(MARK):])
        except ValueError:
            if nonce is None:
                return {}  # the first record line must be the announcement
            continue
        if not isinstance(record, dict):
            continue
        if nonce is None:
            if record.get("hello") is not True or not isinstance(record.get("nonce"), str):
                return {}
            nonce = record["nonce"]
            continue
        if record.get("nonce") != nonce or not isinstance(record.get("i"), int) or record["i"] in records:
            continue
        records[record["i"]] = record
    return records


def verdict(record: dict | None, expected: Sequence[str]) -> Verdict:
    """The verdict on `expected` test ids from a record of `read_records` (None: the task has none)."""
    expected = tuple(expected)
    if record is None:
        return Verdict(False, (), expected, "missing", "")
    out = str(record.get("out", ""))
    outcomes = record.get("outcomes")
    if record.get("expected") != list(expected) or not isinstance(outcomes, dict):
        status = "timeout" if record.get("timed_out") else "error"
        return Verdict(False, (), expected, status, out)
    passed = tuple(t for t in expected if outcomes.get(t) == "ok")
    failed = tuple(t for t in expected if outcomes.get(t) != "ok")
    resolved = bool(expected) and not failed and record.get("rc") == 0 and not record.get("timed_out")
    status = "resolved" if resolved else "timeout" if record.get("timed_out") else (
        "failed" if any(t in outcomes for t in expected) else "error")
    return Verdict(resolved, passed, failed, status, out)
