"""Reverted PRs: FAIL_TO_PASS are the PR's tests that fail with its code undone; kept only when the harness
resolves the task with the PR's code and not without."""

from __future__ import annotations

import json
import pathlib

import pytest

from swerl_jax.tasks import mutations, reverted, sources, validate
from tests.tasks.fake_executor import CALC, TESTS, InProcessExecutor, make_repo

SPEC = {"python": "3.11", "install": "true", "test_cmd": "pytest -rA"}


def _record(commit: str, oracle: str) -> dict:
    tests = TESTS + "\n\ndef test_add_default():\n    assert add(4) == 4\n"
    return {"instance_id": "acme__calc-7", "repo": "acme/calc", "base_commit": commit, "problem_statement": "",
            "code_context": {}, "oracle_new_content": {}, "created_at": "2025-01-01T00:00:00Z", "source": "pr",
            "oracle_patch": oracle, "test_patch": mutations.unified_diff("tests/test_calc.py", TESTS, tests)}


@pytest.fixture()
def repo(tmp_path: pathlib.Path):
    source = make_repo(tmp_path / "src")
    git_dir = sources.task_repo(source / ".git", tmp_path / "repos", "acme/calc")
    return tmp_path, sources.git(git_dir, "rev-parse", "HEAD").strip()


def test_a_pr_whose_tests_need_its_code_is_kept(repo):
    tmp_path, commit = repo
    oracle = mutations.unified_diff("calc.py", CALC, CALC.replace("def add(a, b):", "def add(a, b=0):"))
    row = reverted.validate_pr(_record(commit, oracle), SPEC, InProcessExecutor(tmp_path / "repos"), tmp_path / "l")
    assert row["kept"], row["reason"]
    inst = row["instance"]
    assert json.loads(inst["FAIL_TO_PASS"]) == ["tests/test_calc.py::test_add_default"]
    assert len(json.loads(inst["PASS_TO_PASS"])) == 3 and inst["source"] == "reverted_pr"
    assert inst["base_commit"] == commit and inst["patch"] == oracle and "b=0" not in inst["problem_statement"]


def test_a_pr_whose_tests_pass_without_its_code_is_dropped(repo):
    tmp_path, commit = repo
    oracle = mutations.unified_diff("calc.py", CALC, CALC.replace("return x * 2", "return 2 * x"))
    record = _record(commit, oracle)
    record["test_patch"] = mutations.unified_diff("tests/test_calc.py", TESTS, TESTS + "\n\ndef test_more():\n"
                                                  "    assert add(1, 1) == 2\n")
    row = reverted.validate_pr(record, SPEC, InProcessExecutor(tmp_path / "repos"), tmp_path / "l")
    assert not row["kept"] and "no test of the PR fails" in row["reason"]
    with pytest.raises(ValueError, match="record 'acme__calc-7': field 'test_patch' is empty"):
        reverted.validate_pr({**record, "test_patch": ""}, SPEC, InProcessExecutor(tmp_path / "repos"), tmp_path)


def test_a_merged_state_where_nothing_passes_is_an_infrastructure_failure(repo):
    tmp_path, commit = repo
    oracle = mutations.unified_diff("calc.py", CALC, CALC.replace("def add(a, b):", "def add(a, b=0):"))
    record = _record(commit, oracle)
    broken = "raise ImportError('no werkzeug')\n" + TESTS
    record["test_patch"] = mutations.unified_diff("tests/test_calc.py", TESTS, broken)
    with pytest.raises(validate.InfraError, match="no test of .* passes with the PR merged"):
        reverted.validate_pr(record, SPEC, InProcessExecutor(tmp_path / "repos"), tmp_path / "l")


def test_only_python_files_of_the_test_patch_are_run():
    patch = (mutations.unified_diff("tests/test_config.py", "a = 1\n", "a = 2\n")
             + mutations.unified_diff("tests/static/config.toml", "x = 1\n", "x = 2\n"))
    assert reverted.test_files(patch) == ["tests/test_config.py"]
