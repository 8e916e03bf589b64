"""Helpers for the reward tests: building answers and gold edits, waiting on worker processes."""

from __future__ import annotations

import difflib
import multiprocessing as mp
import socket
import time


def answer(blocks: list[tuple[str, str, str]], thought: str = "reasoning") -> str:
    """A well-formed output with the given (path, search, replace) blocks."""
    body = "".join(
        f"```python\n### {p}\n<<<<<<< SEARCH\n{s}\n=======\n{r}\n>>>>>>> REPLACE\n```\n\n"
        for p, s, r in blocks
    )
    return f"<think>\n{thought}\n</think>\n<solution>\n{body}</solution>"


def gold_block(old: str, new: str, path: str) -> tuple[str, str, str]:
    """One SEARCH/REPLACE block turning ``old`` into ``new``: the changed line span, widened with context
    lines until ``"\\n" + search`` occurs once in ``"\\n" + old`` (the tests check it reproduces ``new``)."""
    a, b = old.split("\n"), new.split("\n")
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    tail = 0
    while tail < min(len(a), len(b)) - start and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo, hi = start, len(a) - tail
    while True:
        search = "\n".join(a[lo:hi])
        if hi > lo and ("\n" + old).count("\n" + search) == 1:
            break
        lo, hi = max(lo - 1, 0), min(hi + 1, len(a))
    return path, search, "\n".join(b[lo:len(b) - (len(a) - hi)])


class Signals:
    """A localhost socket that worker processes connect to when something happened (an item started, a
    worker is starting): the test waits on it, with ``timeout_s`` as a hang guard, instead of sleeping."""

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(timeout_s)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"

    def accept(self) -> tuple[int, socket.socket]:
        """(pid, connection) of the next process that connects; it sends its pid and a newline first."""
        conn, _ = self.sock.accept()
        conn.settimeout(self.timeout_s)
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(64)
            if not chunk:
                raise ConnectionError(f"signal connection closed after {data!r}")
            data += chunk
        return int(data), conn

    def wait(self) -> int:
        """The pid of the next process that signals."""
        pid, conn = self.accept()
        conn.close()
        return pid

    def close(self) -> None:
        self.sock.close()


def wait_until(condition, what: str, timeout_s: float = 120.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s`` (a hang guard only)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s} s")
        time.sleep(0.01)


def stdlib_diff(old: str, new: str) -> str:
    """The contract's normalised diff, from the standard library's difflib (the independent reference)."""
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "old", "new", lineterm="", n=3))
    return "\n".join(lines[2:])


def reference_reward(code_context: dict, oracle_new_content: dict, pred_new_content: dict) -> float:
    """The DESIGN.md reward of hand-applied predicted contents, with the standard library only: per path of
    the union, 0.0 if either diff is empty, else SequenceMatcher(autojunk=False).ratio(); the mean."""
    pred = {p: d for p, new in pred_new_content.items() if (d := stdlib_diff(code_context.get(p, ""), new))}
    oracle = {p: d for p, new in oracle_new_content.items() if (d := stdlib_diff(code_context.get(p, ""), new))}
    paths = set(oracle).union(set(pred))  # the release's order, hence the same float sum
    scores = [0.0 if not pred.get(p) or not oracle.get(p) else
              difflib.SequenceMatcher(None, pred[p], oracle[p], autojunk=False).ratio() for p in paths]
    return sum(scores) / len(scores) if scores else 1.0


def _guarded_child(conn, fn, args) -> None:
    try:
        result = ("ok", fn(*args))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        result = ("error", f"{type(e).__name__}: {e}")
    conn.send(result)


def run_guarded(fn, *args, timeout_s: float = 120.0):
    """``fn(*args)`` in a spawned process; its result, or a test failure if it runs past ``timeout_s``.

    A hang guard, not a speed check: a C-level loop (a backtracking regex) holds the GIL, so a thread
    could not be timed out; a process can be killed. ``fn`` must be importable (module level).
    """
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_guarded_child, args=(child, fn, args), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            raise AssertionError(f"{fn.__name__}{args!r:.80} did not finish within {timeout_s} s: a hang")
        status, value = parent.recv()
    finally:
        process.kill()
        process.join()
        parent.close()
    if status != "ok":
        raise AssertionError(f"{fn.__name__} raised {value}")
    return value
