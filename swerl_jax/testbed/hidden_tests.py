"""Running a testbed task's hidden tests on given file contents, in the bubblewrap sandbox: the execution reward.

    outcome = run_hidden_tests(record, answer_content(record, output))   # TestOutcome(resolved, passed, ...)
    reward = execution_reward(record, output)                             # 1.0 / 0.0 / -1.0 (malformed)
    outcomes = run_hidden_tests_many([(record, content), ...])            # one sandbox for a whole batch

The model's content is adversarial. The host writes nothing from it to its own disk: the task files travel as one
JSON input into a fresh sandbox (no network, this interpreter's installation the only host path it can read, its
own work dir the only writable one; swerl_jax/sandbox/bwrap.py), where the verdict driver (swerl_jax/sandbox/verdict.py)
lays out each task in a fresh folder (paths checked again, files created O_EXCL|O_NOFOLLOW, a missing `__init__.py`
added to every package folder) and runs its hidden test module in a forked child of an isolated interpreter
(`-I -S`, the task's folder after the standard library on sys.path) with a wall-clock limit and bounded output.
Between tasks the driver kills every other process of the sandbox (kill(-1)) and empties /tmp, /dev/shm and the work
dir, so one answer cannot change another's outcome. The outcome comes from the driver's record (each expected test
id's result, reported by the child only after its run finished, under a nonce the code cannot read), never from
what the tests print: printing unittest's summary and exiting early is an error, not a pass. If the sandbox dies (a
disk-quota kill, the driver killed), the task it was running is charged with it and the rest run again in a new
sandbox. Limits: an answer may edit only the task's files, each up to MAX_CONTENT_CHARS. Not defended: code that
tampers with unittest inside its own test process (or writes to its result pipe) can fake its own result; see
swerl_jax/sandbox/verdict.py (the similarity reward is unaffected).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import tempfile
from collections.abc import Sequence

from swerl_jax.answer import FormatError, extract_thought_solution, parse_search_replace
from swerl_jax.reward.apply import apply_code_change
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits
from swerl_jax.sandbox.verdict import IDLE_S, driver_command, driver_inputs, read_records, verdict
from swerl_jax.sandbox.workdirs import remove_tree

MAX_CONTENT_CHARS = 200_000  # an answer's file above this is malformed (the testbed's files are < 2,000 characters)
TAIL_CHARS = 2000  # what TestOutcome.output_tail keeps
@dataclasses.dataclass(frozen=True)
class TestOutcome:
    """What the hidden tests said: resolved (every fail_to_pass and pass_to_pass test passed), the test ids that
    passed and failed, a status (resolved | failed: tests ran, some failed | error: no hidden test ran, e.g. an
    import error | timeout | invalid: the answer edits a file the task does not have, or too large a file |
    limit: a sandbox quota (disk) stopped it | crashed: the sandbox died while running it) and the output's tail."""

    __test__ = False  # not a pytest test class, despite its name

    resolved: bool
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    status: str
    output_tail: str


def default_sandbox() -> Sandbox:
    """The sandbox the hidden tests run in: this interpreter's installation readable, small resource limits."""
    python = pathlib.Path(sys._base_executable).resolve()
    limits = SandboxLimits(memory_bytes=2 << 30, processes=64, file_bytes=16 << 20, disk_bytes=64 << 20,
                           disk_files=20_000, tmp_bytes=64 << 20, shm_bytes=16 << 20)
    return Sandbox(readable=[python.parent.parent], limits=limits)


def _unsafe(path: object) -> bool:
    return (not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\0" in path
            or any(part in ("", ".", "..") for part in path.split("/")))


def _files(record: dict, new_content: dict[str, str] | None) -> dict[str, str] | str:
    """The files of one run (code_context updated with new_content, plus the hidden tests), or why not."""
    context, tests = record["code_context"], record["hidden_tests"]
    if any(_unsafe(p) for p in [*context, *tests]):
        return "the record has an unsafe path"
    new_content = new_content or {}
    if not isinstance(new_content, dict):
        return "new content is not a {path: text} dict"
    for path, text in new_content.items():
        if path not in context:
            return f"the answer edits {str(path)[:200]!r}, which is not a file of the task"
        if not isinstance(text, str) or len(text) > MAX_CONTENT_CHARS:
            return f"the answer's {path!r} is not text of at most {MAX_CONTENT_CHARS} characters"
    return {**context, **new_content, **tests}


def _outcome(record: dict, result: dict | None) -> TestOutcome:
    """The task's outcome from its driver record (swerl_jax/sandbox/verdict.py): never from what the tests print."""
    v = verdict(result, [*record["fail_to_pass"], *record["pass_to_pass"]])
    return TestOutcome(v.resolved, v.passed, v.failed, v.status, v.output[-TAIL_CHARS:])


def _unresolved(record: dict, status: str, why: str) -> TestOutcome:
    expected = (*record["fail_to_pass"], *record["pass_to_pass"])
    return TestOutcome(False, (), expected, status, why[-TAIL_CHARS:])


def run_hidden_tests_many(items: Sequence[tuple[dict, dict[str, str] | None]], *, sandbox: Sandbox | None = None,
                          timeout_s: float = 30, batch_size: int = 64) -> list[TestOutcome]:
    """`run_hidden_tests` for many (record, new_content) pairs: one sandbox per `batch_size` of them, a fresh
    process and folder per pair inside it. Outcomes in the order of `items`.

    timeout_s bounds each pair's tests (wall clock); a sandbox that dies charges the pair it was running and the
    rest run again. Raises SandboxUnavailable when bubblewrap cannot run at all (never for what the code does).
    """
    sandbox = sandbox or default_sandbox()
    outcomes: list[TestOutcome | None] = [None] * len(items)
    runnable = []
    for k, (record, content) in enumerate(items):
        files = _files(record, content)
        if isinstance(files, str):
            outcomes[k] = _unresolved(record, "invalid", files)
        else:
            runnable.append((k, files))
    python = str(pathlib.Path(sys._base_executable).resolve())
    while runnable:
        batch, runnable = runnable[:batch_size], runnable[batch_size:]
        limits = dataclasses.replace(sandbox.limits, timeout_s=len(batch) * (timeout_s + 2) + 30,
                                     cpu_seconds=int(timeout_s) + 30, output_bytes=len(batch) * 80_000 + 65_536)
        tasks = [{"files": files, "module": _module_of(items[k][0]),
                  "expected": [*items[k][0]["fail_to_pass"], *items[k][0]["pass_to_pass"]]} for k, files in batch]
        work = pathlib.Path(tempfile.mkdtemp(prefix="swerl-testbed-"))
        try:
            done = sandbox.run(driver_command(python), work, env={"PYTHONDONTWRITEBYTECODE": "1"}, limits=limits,
                               inputs=driver_inputs(tasks, timeout_s), idle_timeout_s=IDLE_S, supervisor=True)
        finally:
            remove_tree(work)
        results = read_records(done.output)
        for j, (k, _) in enumerate(batch):
            if j in results:
                outcomes[k] = _outcome(items[k][0], results[j])
                continue
            # The sandbox died while running pair j: it is charged with that; the ones after it run again.
            # (a driver that went quiet was stopped or killed by the code it ran: that answer scores 0)
            status = {"timeout": "timeout", "disk": "limit"}.get(done.limit or "", "crashed")
            why = (f"the verdict driver went quiet for {IDLE_S:.0f} s (stopped or killed by the code under test)"
                   if done.limit == "idle" else f"the sandbox stopped ({done.limit or done.returncode})")
            outcomes[k] = _unresolved(items[k][0], status, f"{why}: " + done.output[-TAIL_CHARS:])
            runnable = batch[j + 1:] + runnable
            break
    return outcomes  # type: ignore[return-value]


def _module_of(record: dict) -> str:
    """The hidden test module's dotted name (its path in `hidden_tests` that starts with `tests/test_`)."""
    path = next(p for p in record["hidden_tests"] if p.rsplit("/", 1)[-1].startswith("test"))
    return path[:-3].replace("/", ".")


def run_hidden_tests(record: dict, new_content: dict[str, str] | None, *, sandbox: Sandbox | None = None,
                     timeout_s: float = 30) -> TestOutcome:
    """Run `record`'s hidden tests on its code_context updated with `new_content` (None: the unmodified, buggy
    repository) in a fresh sandbox folder; see the module docstring for what is enforced."""
    return run_hidden_tests_many([(record, new_content)], sandbox=sandbox, timeout_s=timeout_s)[0]


def answer_content(record: dict, output: str) -> dict[str, str] | None:
    """The new file contents of a model answer (`<think>..</think><solution>..</solution>` with SEARCH/REPLACE
    blocks, read as the reward reads it), or None when the answer is malformed."""
    try:
        _, answer = extract_thought_solution(output)
        edits = parse_search_replace(answer)
        if not edits:
            return None
        return apply_code_change(record["code_context"], edits, max_file_chars=MAX_CONTENT_CHARS)
    except FormatError:
        return None


def execution_reward(record: dict, output: str, *, sandbox: Sandbox | None = None, timeout_s: float = 30) -> float:
    """SWE-RL's convention for the execution reward: 1.0 when the answer resolves the task (its hidden tests pass),
    0.0 when not, -1.0 when the answer is malformed."""
    content = answer_content(record, output)
    if content is None:
        return -1.0
    return 1.0 if run_hidden_tests(record, content, sandbox=sandbox, timeout_s=timeout_s).resolved else 0.0
