"""Grade a test log by SWE-bench's rules: resolved iff every FAIL_TO_PASS and every PASS_TO_PASS test passes."""

from __future__ import annotations

import json
import re

from swerl_jax.tasks import specs


def test_list(instance: dict, key: str) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS as a list (the dataset stores them as JSON strings)."""
    value = instance.get(key, [])
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as err:
            raise ValueError(f"instance {instance.get('instance_id')}: field {key} is not a JSON list: {err}") from err
    if not isinstance(value, list):
        kind = type(value).__name__
        raise ValueError(f"instance {instance.get('instance_id')}: field {key} must be a list, got {kind}")
    return value


# ANSI escape sequences (CSI: colours, cursor moves; and the two-byte ones). A repository whose pytest settings say
# --color=yes (python-humanize) colours the -rA lines ("\x1b[32mPASSED\x1b[0m tests/..."), which SWE-bench's log
# parsers do not match: every test read as missing, so a gold patch read as unresolved (issue 58's generation).
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


def test_output(log: str) -> str | None:
    """The part of an eval log between SWE-bench's start/end markers, without ANSI colour codes (None when the
    tests never started)."""
    consts = specs.constants()
    start, end = consts.START_TEST_OUTPUT, consts.END_TEST_OUTPUT
    if start not in log:
        return None
    body = log.split(start, 1)[1]
    return _ANSI.sub("", body.split(end, 1)[0])


def grade(instance: dict, log: str) -> dict:
    """Per-instance grading: which FAIL_TO_PASS / PASS_TO_PASS tests passed, and `resolved`.

    A test passes when the repository's SWE-bench log parser reports it PASSED or XFAIL; a test missing from
    the log counts as failed, as in the official harness.
    """
    output = test_output(log)
    statuses = specs.instance_log_parser(instance)(output) if output is not None else {}
    ok = {specs.constants().TestStatus.PASSED.value, specs.constants().TestStatus.XFAIL.value}
    report = {"tests_ran": output is not None}
    resolved = output is not None
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        tests = test_list(instance, key)
        failed = [t for t in tests if statuses.get(t) not in ok]
        report[key] = {"passed": len(tests) - len(failed), "total": len(tests), "failed": failed}
        resolved = resolved and not failed
    report["resolved"] = resolved
    # pytest's own crash (INTERNALERROR: out of memory under the cap, a broken plugin): the tests' statuses are
    # missing, not failed, so an unresolved verdict would be the harness's failure counted as the patch's
    report["runner_crashed"] = output is not None and runner_crashed(output)
    return report


# pytest's closing line ("==== 2 failed, 129 passed in 3.69s ====", before pytest 5.1 "in 1.45 seconds"): a session
# that printed it finished.
_SUMMARY = re.compile(r"^=+ .*\bin \d+(?:\.\d+)?(?:s| seconds)\b.* =+$")


def runner_crashed(output: str) -> bool:
    """Whether pytest itself crashed: an `INTERNALERROR>` line with no closing summary after it. pytest's own test
    suite prints INTERNALERROR lines in the captured output of tests that check them (pytest-dev__pytest-11148's
    empty-patch run read as a crash, an infrastructure error, though its session finished)."""
    lines = output.splitlines()
    last = max((i for i, line in enumerate(lines) if line.startswith("INTERNALERROR>")), default=None)
    return last is not None and not any(_SUMMARY.match(line.strip()) for line in lines[last + 1:])
