"""Running a testbed task's hidden tests on given file contents, in the bubblewrap sandbox: the execution reward.

    outcome = run_hidden_tests(record, answer_content(record, output))   # TestOutcome(resolved, passed, ...)
    reward = execution_reward(record, output)                             # 1.0 / 0.0 / -1.0 (malformed)
    outcomes = run_hidden_tests_many([(record, content), ...])            # one sandbox for a whole batch

The model's content is adversarial. The host writes nothing from it to its own disk: the task files travel as one
JSON input into a fresh sandbox (no network, this interpreter's installation the only host path it can read, its
own work dir the only writable one; swerl_jax/sandbox/bwrap.py), where a small runner lays out each task in a fresh
folder (paths checked again, files created O_EXCL|O_NOFOLLOW, a missing `__init__.py` added to every package
folder) and runs `python -m unittest -v <hidden test module>` in a forked child with a wall-clock limit and bounded
output. Between tasks the runner kills every other process of the sandbox (kill(-1)) and empties /tmp, /dev/shm and
the work dir, so one answer cannot change another's outcome; it is non-dumpable, so a task cannot write into its
result stream. If the sandbox dies (a disk-quota kill, the runner killed), the task it was running is charged with
it and the rest run again in a new sandbox. Limits: an answer may edit only the task's files, each up to
MAX_CONTENT_CHARS. Not defended: code that tampers with unittest inside its own test process can fake its own
result (the similarity reward is unaffected).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import shlex
import sys
import tempfile
from collections.abc import Sequence

from swerl_jax.answer import FormatError, extract_thought_solution, parse_search_replace
from swerl_jax.reward.apply import apply_code_change
from swerl_jax.sandbox.bwrap import INPUTS_DIR, Sandbox, SandboxLimits
from swerl_jax.sandbox.workdirs import remove_tree

MAX_CONTENT_CHARS = 200_000  # an answer's file above this is malformed (the testbed's files are < 2,000 characters)
OUTPUT_HEAD, OUTPUT_TAIL = 4096, 8192  # bytes of a task's test output the runner keeps (first and last)
TAIL_CHARS = 2000  # what TestOutcome.output_tail keeps
_MARK = "@@testbed-result@@ "  # starts the runner's result lines
# The runner, run inside the sandbox by this interpreter with -I -S (stdlib only, nothing from the environment).
_RUNNER = r'''
import ctypes, json, os, select, shutil, signal, subprocess, sys, time, traceback, unittest

MARK, HEAD, TAIL = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def clean(folder):
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except BaseException:  # unreadable or nested too deep for Python's recursion: rm copes
            subprocess.run(["rm", "-rf", "--", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def lay_out(root, files):
    os.mkdir(root)
    for path, text in files.items():
        parts = path.split("/")
        if path.startswith("/") or "\\" in path or "\0" in path or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"unsafe path {path!r}")
        folder = root
        for part in parts[:-1]:
            folder = os.path.join(folder, part)
            if not os.path.isdir(folder):
                os.mkdir(folder)
        fd = os.open(os.path.join(root, path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
    for folder, _, names in os.walk(root):  # regular packages: an installed `tests` package cannot shadow ours
        if folder != root and any(n.endswith(".py") for n in names) and "__init__.py" not in names:
            os.close(os.open(os.path.join(folder, "__init__.py"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))


def run(root, module, timeout):
    sys.stdout.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            os.close(r)
            os.setsid()
            os.dup2(w, 1)
            os.dup2(w, 2)
            os.close(w)
            os.chdir(root)
            sys.path.insert(0, root)
            os.environ["HOME"] = root
            program = unittest.main(module=None, argv=["python -m unittest", "-v", module], exit=False)
            code = 0 if program.result.wasSuccessful() else 1
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(w)
    head, tail, total, status, timed_out = bytearray(), bytearray(), 0, None, False
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if select.select([r], [], [], min(left, 0.05))[0]:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            total += len(chunk)
            room = HEAD - len(head)
            head += chunk[:max(room, 0)]
            tail = (tail + chunk[max(room, 0):])[-TAIL:]
        elif status is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            status = status if done else None
        else:
            break  # the child exited and its output is drained; a process it left holds the pipe
    os.close(r)
    try:
        os.kill(-1, signal.SIGKILL)  # every other process of the sandbox: the child, anything it started
    except ProcessLookupError:
        pass
    if status is None:
        status = os.waitpid(pid, 0)[1]
    out = head.decode("utf-8", "replace")
    if total > len(head) + len(tail):
        out += f"\n[... {total - len(head) - len(tail)} bytes cut ...]\n"
    out += tail.decode("utf-8", "replace")
    return os.waitstatus_to_exitcode(status), out, timed_out


def main():
    try:  # non-dumpable: a task cannot open /proc/<this>/fd/1 and write fake results
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass
    sys.dont_write_bytecode = True
    with open(os.path.join(os.environ["INPUTS"], "tasks.json"), encoding="utf-8") as f:
        spec = json.load(f)
    work = os.getcwd()
    for i, task in enumerate(spec["tasks"]):
        root = os.path.join(work, f"t{i}")
        try:
            for folder in (work, "/tmp", "/dev/shm"):
                clean(folder)
            lay_out(root, task["files"])
            rc, out, timed_out = run(root, task["module"], spec["timeout"])
        except Exception as e:
            rc, out, timed_out = 3, f"testbed runner: {e!r}", False
        sys.stdout.write(MARK + json.dumps({"i": i, "rc": rc, "timed_out": timed_out, "out": out}) + "\n")
        sys.stdout.flush()


main()
'''
_TEST_LINE = re.compile(r"^(\w+) \(([\w.]+)\) \.\.\. (.*)$", re.M)
_FAILURE_HEADER = re.compile(r"^(?:FAIL|ERROR): \w+ \(([\w.]+)\)", re.M)


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


def _outcome(record: dict, rc: int, out: str, timed_out: bool) -> TestOutcome:
    expected = [*record["fail_to_pass"], *record["pass_to_pass"]]
    reported: dict[str, bool] = {}
    for _, test_id, result in _TEST_LINE.findall(out):
        reported[test_id] = reported.get(test_id, True) and result == "ok"
    for test_id in _FAILURE_HEADER.findall(out):
        reported[test_id] = False
    passed = tuple(t for t in expected if reported.get(t) is True)
    failed = tuple(t for t in expected if reported.get(t) is not True)
    resolved = not failed and rc == 0 and not timed_out
    if resolved:
        status = "resolved"
    elif timed_out:
        status = "timeout"
    else:
        status = "failed" if any(t in reported for t in expected) else "error"
    return TestOutcome(resolved, passed, failed, status, out[-TAIL_CHARS:])


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
    python = shlex.quote(str(pathlib.Path(sys._base_executable).resolve()))
    while runnable:
        batch, runnable = runnable[:batch_size], runnable[batch_size:]
        limits = dataclasses.replace(sandbox.limits, timeout_s=len(batch) * (timeout_s + 2) + 30,
                                     cpu_seconds=int(timeout_s) + 30, output_bytes=len(batch) * 80_000 + 65_536)
        tasks = [{"files": files, "module": _module_of(items[k][0])} for k, files in batch]
        spec = json.dumps({"tasks": tasks, "timeout": timeout_s})
        work = pathlib.Path(tempfile.mkdtemp(prefix="swerl-testbed-"))
        try:
            done = sandbox.run(f"exec {python} -I -S {INPUTS_DIR}/runner.py {shlex.quote(_MARK)} {OUTPUT_HEAD} "
                               f"{OUTPUT_TAIL}", work, env={"PYTHONDONTWRITEBYTECODE": "1"}, limits=limits,
                               inputs={"runner.py": _RUNNER, "tasks.json": spec})
        finally:
            remove_tree(work)
        results = {}
        for line in done.output.split("\n"):  # not splitlines: it also splits at \x1c-\x1e, \x85, ...
            if line.startswith(_MARK):
                try:
                    result = json.loads(line[len(_MARK):])
                    results[int(result["i"])] = result
                except (ValueError, KeyError, TypeError):
                    continue
        for j, (k, _) in enumerate(batch):
            if j in results:
                r = results[j]
                outcomes[k] = _outcome(items[k][0], int(r["rc"]), str(r["out"]), bool(r["timed_out"]))
                continue
            # The sandbox died while running pair j: it is charged with that; the ones after it run again.
            status = {"timeout": "timeout", "disk": "limit"}.get(done.limit or "", "crashed")
            outcomes[k] = _unresolved(items[k][0], status, f"the sandbox stopped ({done.limit or done.returncode}): "
                                      + done.output[-TAIL_CHARS:])
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
