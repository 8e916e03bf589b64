"""Importers of published task sets (`tasks.importers`, `tasks.imported`, `python -m swerl_jax.tasks import`): a
small hand-written record in each set's real shape (fields from its dataset card, cited at each record) becomes a
SWE-bench-shaped instance whose patches apply, marked runnable or out of reach with its reason; bad records are one
line each, naming the record and the field, and the rest of the file is still imported."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

from swerl_jax.tasks import importers
from swerl_jax.tasks.imported import import_file

OLD = "def add(a, b):\n    return a + b\n"
NEW = "def add(a, b):\n    return a - b\n"
FIX = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
       "-    return a - b\n+    return a + b\n")

# https://huggingface.co/datasets/SWE-Gym/SWE-Gym (README dataset_info): instance_id, hints_text, patch, test_patch,
# created_at, problem_statement, repo, base_commit, version, PASS_TO_PASS (sequence), FAIL_TO_PASS (sequence)
SWE_GYM = {"instance_id": "getmoto__moto-5752", "hints_text": "", "patch": FIX, "test_patch": "",
           "created_at": "2022-12-08T21:12:40Z", "problem_statement": "add() subtracts", "repo": "getmoto/moto",
           "base_commit": "b2300f1eae1323e3e8bc45f97e530ce129dff12e", "version": "4.0",
           "PASS_TO_PASS": ["tests/test_calc.py::test_zero"], "FAIL_TO_PASS": ["tests/test_calc.py::test_add"]}

# https://huggingface.co/datasets/nebius/SWE-rebench (README dataset_info): instance_id, base_commit, created_at
# (timestamp[ns]), environment_setup_commit, hints_text, patch, problem_statement, repo, test_patch, meta (struct:
# commit_name, failed_lite_validators, has_test_patch, is_lite, ...), version, install_config (struct: python,
# install, test_cmd, pip_packages, pre_install, packages, reqs_path, ...), requirements, FAIL_TO_PASS, PASS_TO_PASS
SWE_REBENCH = {"instance_id": "acme__calc-12", "base_commit": "1" * 40, "created_at": 1_700_000_000_000_000_000,
               "environment_setup_commit": "2" * 40, "hints_text": "", "patch": FIX, "problem_statement": "add()",
               "repo": "acme/calc", "test_patch": "", "version": "0.1",
               "meta": {"commit_name": "head_commit", "failed_lite_validators": [], "has_test_patch": True,
                        "is_lite": True},
               "install_config": {"python": 3.9, "install": "pip install -e .", "test_cmd": "pytest -rA",
                                  "pip_packages": ["pytest"], "pre_install": None, "packages": "requirements.txt",
                                  "reqs_path": ["requirements.txt"]},
               "requirements": "pytest==7.4.0\n", "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
               "PASS_TO_PASS": []}

# https://huggingface.co/datasets/SWE-bench/SWE-smith (README dataset_info): instance_id, patch (the bug), FAIL_TO_PASS,
# PASS_TO_PASS (list), image_name, repo (the swesmith mirror), problem_statement
BUG = FIX.replace("-    return a - b\n+    return a + b\n", "-    return a + b\n+    return a - b\n")
SWE_SMITH = {"instance_id": "acme__calc.1a2b3c4d.func_pm_op_flip__x1", "patch": BUG,
             "FAIL_TO_PASS": ["tests/test_calc.py::test_add"], "PASS_TO_PASS": [],
             "image_name": "swesmith.x86_64.acme__calc.1a2b3c4d", "repo": "swesmith/acme__calc.1a2b3c4d",
             "problem_statement": ""}

# https://huggingface.co/datasets/R2E-Gym/R2E-Gym-Subset: repo_name, docker_image, commit_hash, parsed_commit_content
# (R2E-Gym's ParsedCommit as JSON: file_diffs[{header.file.path, old_file_content, new_file_content, ...}],
# old_commit_hash, new_commit_hash, commit_message, commit_date), execution_result_content (its ExecutionResult:
# test_file_names, test_file_codes, old_commit_res_stdout, ...), expected_output_json ({test key: status}),
# problem_statement, prompt, relevant_files, modified_files, ... (src/r2egym/commit_models/diff_classes.py)
R2E_TEST = "from calc import add\n\nclass TestAdd:\n    def test_add(self):\n        assert add(1, 2) == 3\n\n" \
           "def test_zero():\n    assert add(0, 0) == 0\n"
R2E_GYM = {"repo_name": "tornado", "docker_image": "namanjain12/tornado_final:" + "3" * 40, "commit_hash": "3" * 40,
           "parsed_commit_content": json.dumps({
               "file_diffs": [{"header": {"file": {"path": "calc.py"}}, "old_file_content": NEW,
                               "new_file_content": OLD, "hunks": []},
                              {"header": {"file": {"path": "tests/test_old.py"}}, "old_file_content": "x = 1\n",
                               "new_file_content": "x = 2\n", "hunks": []}],
               "old_commit_hash": "4" * 40, "new_commit_hash": "3" * 40, "commit_message": "fix add",
               "commit_date": "2020-01-02T03:04:05", "metadata": {}}),
           "execution_result_content": json.dumps({
               "repo_name": "tornado", "new_commit_hash": "3" * 40, "test_file_names": ["test_1.py"],
               "test_file_codes": [R2E_TEST], "setup_res_code": 0, "setup_res_stdout": "", "setup_res_stderr": "",
               "old_commit_res_code": 1, "old_commit_res_stdout": "=== short test summary info ===\nFAILED "
               "r2e_tests/test_1.py::TestAdd::test_add - assert -1 == 3\nPASSED r2e_tests/test_1.py::test_zero\n"}),
           "expected_output_json": json.dumps({"TestAdd.test_add": "PASSED", "test_zero": "PASSED"}),
           "problem_statement": "add(1, 2) returns -1", "relevant_files": ["calc.py"], "modified_files": ["calc.py"]}


def _applies(patch: str, before: dict[str, str], tmp: pathlib.Path) -> dict[str, str]:
    """The files after `git apply` of `patch` onto `before` (asserts it applies)."""
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for name, text in before.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    done = subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=tmp, capture_output=True)
    assert done.returncode == 0, done.stderr
    return {str(p.relative_to(tmp)): p.read_text() for p in tmp.rglob("*") if p.is_file()}


def _write(path: pathlib.Path, rows: list) -> pathlib.Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _run(fmt: str, rows: list, tmp_path: pathlib.Path, repos=None) -> tuple[list[dict], object]:
    report = import_file(fmt, _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl", repos)
    return [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()], report


def test_every_format_yields_swebench_shaped_instances_with_source_and_reach(tmp_path):
    for fmt, row in (("swe-gym", SWE_GYM), ("swe-rebench", SWE_REBENCH), ("swe-smith", SWE_SMITH),
                     ("r2e-gym", R2E_GYM)):
        (instance,), report = _run(fmt, [row], tmp_path)
        assert set(importers.FIELDS) <= set(instance), (fmt, set(importers.FIELDS) - set(instance))
        assert instance["source"] == fmt and report.written == 1 and not report.bad
        assert instance["FAIL_TO_PASS"] and "out_of_reach" in instance
    # the gold patch of each fixes the bug: SWE-smith's is the published bug inverted
    assert _applies(importers.reverse_patch(BUG), {"calc.py": NEW}, tmp_path / "g") == {"calc.py": OLD}


def test_reach_a_swebench_spec_or_an_own_spec_runs_else_the_reason(tmp_path):
    known = {**SWE_GYM, "instance_id": "pallets__flask-1", "repo": "pallets/flask", "version": "2.0"}
    (gym, flask), report = _run("swe-gym", [SWE_GYM, known], tmp_path)
    assert flask["out_of_reach"] is None  # SWE-bench's table has (pallets/flask, 2.0)
    assert "no install/test spec" in gym["out_of_reach"]["reason"] and "getmoto/moto" in gym["out_of_reach"]["reason"]
    assert report.runnable == 1 and sum(report.out_of_reach.values()) == 1
    (rebench,), _ = _run("swe-rebench", [SWE_REBENCH], tmp_path)
    assert rebench["out_of_reach"] is None and rebench["spec"]["python"] == "3.9"  # its own install_config
    assert rebench["created_at"].startswith("2023-11-14") and rebench["meta"]["is_lite"] is True
    (smith,), _ = _run("swe-smith", [SWE_SMITH], tmp_path)
    assert "branch acme__calc.1a2b3c4d.func_pm_op_flip__x1" in smith["out_of_reach"]["reason"]
    repos = tmp_path / "repos"
    repos.mkdir()
    (flask,), _ = _run("swe-gym", [known], tmp_path, repos=repos)
    assert "pallets/flask is not in --repos" in flask["out_of_reach"]["reason"]  # tasks.reach's words


def test_r2e_gym_gold_patch_hidden_tests_and_the_fail_to_pass_split(tmp_path):
    (r2e,), _ = _run("r2e-gym", [R2E_GYM], tmp_path)
    assert r2e["repo"] == "tornadoweb/tornado" and r2e["base_commit"] == "4" * 40
    assert r2e["FAIL_TO_PASS"] == ["r2e_tests/test_1.py::TestAdd::test_add"]  # failed before the fix
    assert r2e["PASS_TO_PASS"] == ["r2e_tests/test_1.py::test_zero"]
    assert "tests/test_old.py" not in r2e["patch"]  # the commit's own test change is not the gold patch
    after = _applies(r2e["patch"] + r2e["test_patch"], {"calc.py": NEW}, tmp_path / "r")
    assert after == {"calc.py": OLD, "r2e_tests/test_1.py": R2E_TEST}
    assert r2e["created_at"] == "2020-01-02T03:04:05" and r2e["out_of_reach"]["reason"].startswith("no install")


def test_bad_records_are_one_line_each_naming_record_and_field_and_the_file_goes_on(tmp_path):
    rows = [SWE_GYM, "{not json", {k: v for k, v in SWE_GYM.items() if k != "base_commit"} | {"instance_id": "b"},
            {**SWE_GYM, "instance_id": "c", "FAIL_TO_PASS": "[1, 2"}, {**SWE_GYM, "instance_id": "d", "patch": 3},
            SWE_GYM, {**SWE_GYM, "instance_id": "e", "FAIL_TO_PASS": []}, [1, 2],
            {**SWE_GYM, "instance_id": "f", "base_comit": "x", "base_commit": None}]
    out, report = _run("swe-gym", rows, tmp_path)
    assert [i["instance_id"] for i in out] == ["getmoto__moto-5752"] and report.records == 9
    assert len(report.bad) == 8, report.bad
    joined = "\n".join(report.bad)
    for expected in ("in.jsonl:2: not JSON", "in.jsonl:3 (b): field 'base_commit': missing",
                     "in.jsonl:4 (c): field 'FAIL_TO_PASS': not a JSON list",
                     "in.jsonl:5 (d): field 'patch': expected str, got int",
                     "in.jsonl:6 (getmoto__moto-5752): field 'instance_id'", "in.jsonl:7 (e): field 'FAIL_TO_PASS': "
                     "empty", "in.jsonl:8: not an object", "(did you mean 'base_comit'?)"):
        assert expected in joined, (expected, joined)
    r2e = [{**R2E_GYM, "repo_name": "tornad"}, {**R2E_GYM, "parsed_commit_content": "{"},
           {**R2E_GYM, "expected_output_json": json.dumps({"test_zero": "PASSED"})}]
    out, report = _run("r2e-gym", r2e, tmp_path)
    assert out == [] and len(report.bad) == 3
    assert "did you mean 'tornado'" in report.bad[0] and "'parsed_commit_content': not JSON" in report.bad[1]
    assert "no test fails before the fix" in report.bad[2]


def test_the_cli_imports_and_a_wrong_format_or_missing_file_is_one_line(tmp_path):
    import sys

    src = _write(tmp_path / "gym.jsonl", [SWE_GYM, "[]"])
    cmd = [sys.executable, "-m", "swerl_jax.tasks", "import", "--format", "swe-gym", str(src), "--out",
           str(tmp_path / "o.jsonl")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith(f"import swe-gym {src}: 1 instances of 2 records, 0 can "
                                                           "run here, 1 out of reach, 1 bad records")
    assert "bad record: " in done.stderr and (tmp_path / "o.jsonl").is_file()
    with pytest.raises(ValueError, match="choose one of"):
        import_file("swe-bench", src, tmp_path / "x.jsonl")
    with pytest.raises(FileNotFoundError, match="no such file"):
        import_file("swe-gym", tmp_path / "absent.jsonl", tmp_path / "x.jsonl")
