"""The two verdicts of a pytest grading and how they combine: pytest's log, graded as SWE-bench does (`grading.py`),
and the trusted plugin's record (`sandbox/pytest_verdict.py`), with SWE-bench's test ids made from its node ids."""

from __future__ import annotations

from collections.abc import Callable

from swerl_jax.tasks import specs

VERDICTS = ("log", "plugin")


def runs_pytest(spec: dict) -> bool:
    """Whether the spec's test command runs pytest (directly or through tox, whose commands run it)."""
    cmds = spec["test_cmd"] if isinstance(spec["test_cmd"], list) else [spec["test_cmd"]]
    return all(c.split()[:1] in (["pytest"], ["tox"]) or " pytest " in f" {c} " for c in cmds)


# pytest's `-rA` summary order (passed, skipped, xfailed, xpassed, errors, failed): where two node ids make one
# SWE-bench id, the later line wins in its parser, as in the log
_SUMMARY_ORDER = {"PASSED": 0, "SKIPPED": 1, "XFAIL": 2, "XPASS": 3, "ERROR": 4, "FAILED": 5}


def swebench_ids(instance: dict) -> Callable[[dict[str, str]], dict[str, str]]:
    """{node id: status} -> {SWE-bench test id: status}: the repository's own SWE-bench log parser read over one
    `STATUS node-id` line per test, built by the host from the plugin's record (never from the test log), so ids
    come out as the dataset writes them (cut at a space in a parameter, as the parser cuts them). `instance`
    picks the parser (`specs.instance_log_parser`)."""
    parser = specs.instance_log_parser(instance)

    def convert(outcomes: dict[str, str]) -> dict[str, str]:
        lines = [f"{status} {node}" for node, status in  # one line each: a node id never holds a newline
                 sorted(outcomes.items(), key=lambda kv: _SUMMARY_ORDER.get(kv[1], len(_SUMMARY_ORDER)))
                 if "\n" not in node and "\r" not in node]
        return {str(k): str(v) for k, v in parser("\n".join(lines)).items()}

    return convert


def verdict_status(plugin: dict, returncode: int | None, log_resolved: bool = True) -> dict:
    """The harness status of a plugin verdict: resolved (the record says so, and so does the log of the same run:
    a forgery must fool both), unresolved, tampered (the test machinery changed), or error (no record: the run
    ended early, crashed or never started; its log may still show results)."""
    if plugin["status"] == "resolved" and not log_resolved:
        return {"status": "unresolved", "resolved": False,
                "error": "the plugin's record says resolved but pytest's log of the same run does not"}
    if plugin["status"] in ("resolved", "unresolved", "tampered"):
        out = {"status": plugin["status"], "resolved": plugin["resolved"]}
        if plugin["status"] == "tampered":
            out["error"] = "the test machinery changed during the run: " + "; ".join(plugin["tampered"][:3])
        return out
    return {"status": "error", "resolved": False,
            "error": f"the trusted plugin wrote no record (exit {returncode}): the run ended early: see test.log"}
