"""SWE-bench grading: resolved iff all FAIL_TO_PASS and PASS_TO_PASS pass; missing tests fail; no markers, no run."""

import json

import pytest

from swerl_jax.tasks import grading, specs

START, END = specs.constants().START_TEST_OUTPUT, specs.constants().END_TEST_OUTPUT
INSTANCE = {"instance_id": "pallets__flask-1", "repo": "pallets/flask",
            "FAIL_TO_PASS": json.dumps(["t.py::f2p"]), "PASS_TO_PASS": json.dumps(["t.py::p2p_a", "t.py::p2p_b"])}


def log(*lines: str) -> str:
    return "setup noise\nPASSED t.py::f2p\n" + START + "\n" + "\n".join(lines) + "\n" + END + "\nPASSED after\n"


def test_all_pass_resolves():
    report = grading.grade(INSTANCE, log("PASSED t.py::f2p", "PASSED t.py::p2p_a", "XFAIL t.py::p2p_b"))
    assert report["resolved"] and report["FAIL_TO_PASS"] == {"passed": 1, "total": 1, "failed": []}


@pytest.mark.parametrize("lines", [
    ("FAILED t.py::f2p", "PASSED t.py::p2p_a", "PASSED t.py::p2p_b"),  # the fix does not fix
    ("PASSED t.py::f2p", "FAILED t.py::p2p_a", "PASSED t.py::p2p_b"),  # the fix breaks something
    ("PASSED t.py::f2p", "PASSED t.py::p2p_a"),  # a test missing from the log counts as failed
])
def test_any_failure_or_missing_test_does_not_resolve(lines):
    assert not grading.grade(INSTANCE, log(*lines))["resolved"]


def test_coloured_pytest_lines_are_read_as_the_plain_ones():
    """A repository whose pytest settings say --color=yes (python-humanize) colours the -rA lines; the log parser
    matched none of them, so a gold patch read as unresolved (issue 58's generation dropped 6 of 7 candidates)."""
    green, red, reset = "\x1b[32m", "\x1b[31m", "\x1b[0m"
    report = grading.grade(INSTANCE, log(f"{green}PASSED{reset} t.py::f2p", f"{green}PASSED{reset} t.py::p2p_a",
                                         f"\x1b[1m{green}PASSED{reset} t.py::p2p_b"))
    assert report["resolved"], report
    assert not grading.grade(INSTANCE, log(f"{red}FAILED{reset} t.py::f2p", f"{green}PASSED{reset} t.py::p2p_a",
                                           f"{green}PASSED{reset} t.py::p2p_b"))["resolved"]


def test_only_the_marked_section_counts():
    """A PASSED line outside the markers (setup output) must not count; no markers means the tests never ran."""
    report = grading.grade(INSTANCE, log("PASSED t.py::p2p_a", "PASSED t.py::p2p_b"))
    assert report["FAIL_TO_PASS"]["failed"] == ["t.py::f2p"]
    never = grading.grade(INSTANCE, "PASSED t.py::f2p\nPASSED t.py::p2p_a\nPASSED t.py::p2p_b\n")
    assert never == {**never, "tests_ran": False, "resolved": False}


def test_bad_test_list_names_the_instance_and_field():
    with pytest.raises(ValueError, match="pallets__flask-1: field FAIL_TO_PASS is not a JSON list"):
        grading.grade({**INSTANCE, "FAIL_TO_PASS": "[oops"}, log())
