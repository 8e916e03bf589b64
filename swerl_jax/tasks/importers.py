"""Published task sets in their own shapes -> SWE-bench-shaped instances, each marked runnable here or out of reach.

    python -m swerl_jax.tasks import --format swe-gym IN.parquet --out OUT.jsonl [--repos DIR]

Formats (each reads the local JSONL / JSON / parquet file a user downloaded from the dataset's card; nothing here
reaches the network):
- swe-gym (SWE-Gym/SWE-Gym): SWE-bench's own fields (no environment_setup_commit).
- swe-rebench (nebius/SWE-rebench): SWE-bench's fields plus `install_config` (the instance's own install/test
  spec: kept as `spec`, the keys SWE-bench's spec tables use), `meta` and `requirements`.
- swe-smith (SWE-bench/SWE-smith): instance_id, repo (`swesmith/owner__name.commit8`, a mirror whose branch
  `instance_id` holds the bug), `patch` (the diff that INTRODUCES the bug: the gold fix is its inverse),
  FAIL_TO_PASS, PASS_TO_PASS, image_name, problem_statement.
- r2e-gym (R2E-Gym/R2E-Gym-Subset): repo_name, commit_hash, `parsed_commit_content` (the commit: old and new
  commit, date, each file's old and new content), `execution_result_content` (the hidden tests' files and the
  pre-fix test log), `expected_output_json` (each hidden test's status after the fix), problem_statement. The
  gold patch is the commit's non-test Python changes; the hidden tests (r2e_tests/) are the test patch.

Every instance gets `source` (the format) and `out_of_reach`: null when the harness can grade it here (a
SWE-bench spec for its repo and version, or a complete spec of its own; with --repos, its clone is there), else
{reason, fix} as `tasks.reach` words them. A record that cannot become an instance is one line naming the file,
the record and the field, counted; the file is never abandoned mid-way.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import re
from collections.abc import Callable

FIELDS = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
          "FAIL_TO_PASS", "PASS_TO_PASS", "version", "created_at", "environment_setup_commit", "source")
SPEC_KEYS = ("python", "install", "test_cmd")  # what an instance's own spec must hold to build and run
COMMIT = re.compile(r"[0-9a-f]{40}")
# R2E-Gym names a repository by its short name (the instance ids of its images: owner__name)
R2E_REPOS = {"aiohttp": "aio-libs/aiohttp", "coveragepy": "nedbat/coveragepy", "datalad": "datalad/datalad",
             "numpy": "numpy/numpy", "orange3": "biolab/orange3", "pandas": "pandas-dev/pandas",
             "pillow": "python-pillow/Pillow", "pyramid": "Pylons/pyramid", "scrapy": "scrapy/scrapy",
             "tornado": "tornadoweb/tornado", "sympy": "sympy/sympy", "bokeh": "bokeh/bokeh"}


class BadRecord(ValueError):
    """A record that cannot become an instance: the field and what is wrong with it."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"field {field!r}: {problem}")
        self.field = field


def need(row: dict, field: str, kind: type | tuple = str) -> object:
    """row[field], or BadRecord naming it when absent, null or of another type (strings must be non-empty)."""
    if field not in row or row[field] is None:
        near = difflib.get_close_matches(field, [str(k) for k in row if k != field], n=1)
        raise BadRecord(field, "missing" + (f" (did you mean {near[0]!r}?)" if near else ""))
    value = row[field]
    if not isinstance(value, kind):
        raise BadRecord(field, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    if isinstance(value, str) and not value.strip():
        raise BadRecord(field, "empty")
    return value


def test_ids(row: dict, field: str) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS: a list of strings (parquet) or a JSON string of one (SWE-bench's own files)."""
    value = row.get(field)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise BadRecord(field, f"not a JSON list ({e.msg})") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise BadRecord(field, f"expected a list of test ids, got {type(value).__name__}")
    return list(value)


def timestamp(value: object) -> str:
    """created_at as ISO text: a string kept, a datetime (parquet's timestamp) or epoch ns/s written out."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1e9 if value > 1e12 else value
        return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()
    return "" if value is None else str(value)


def swebench_fields(row: dict, source: str) -> dict:
    """The fields SWE-bench-shaped sets share (SWE-Gym, SWE-rebench), checked."""
    out = {k: need(row, k) for k in ("instance_id", "repo", "base_commit", "patch", "problem_statement")}
    out.update(test_patch=row.get("test_patch") or "", hints_text=row.get("hints_text") or "",
               FAIL_TO_PASS=test_ids(row, "FAIL_TO_PASS"), PASS_TO_PASS=test_ids(row, "PASS_TO_PASS"),
               version=str(row.get("version") or ""), created_at=timestamp(row.get("created_at")),
               environment_setup_commit=row.get("environment_setup_commit") or row["base_commit"], source=source)
    if not out["FAIL_TO_PASS"]:
        raise BadRecord("FAIL_TO_PASS", "empty: nothing tells a fix from no fix")
    return out


def swe_gym(row: dict) -> dict:
    """SWE-Gym/SWE-Gym: SWE-bench's fields as they are."""
    return swebench_fields(row, "swe-gym")


def swe_rebench(row: dict) -> dict:
    """nebius/SWE-rebench: SWE-bench's fields, its `install_config` kept as the instance's own `spec`."""
    out = swebench_fields(row, "swe-rebench")
    config = row.get("install_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as e:
            raise BadRecord("install_config", f"not JSON ({e.msg})") from None
    if config is not None:
        if not isinstance(config, dict):
            raise BadRecord("install_config", f"expected an object, got {type(config).__name__}")
        spec = {k: v for k, v in config.items() if v not in (None, "", [])}
        if "python" in spec:
            spec["python"] = str(spec["python"])
        out["spec"] = spec
    out["meta"] = row.get("meta") or {}
    return out


def reverse_patch(patch: str) -> str:
    """The inverse of a unified diff (git's or diff -u's): old and new sides swapped, file by file and line by
    line (SWE-smith publishes the bug; the gold fix undoes it)."""
    out = []
    lines = patch.splitlines(keepends=True)
    k = 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("--- ") and k + 1 < len(lines) and lines[k + 1].startswith("+++ "):
            out += ["--- " + _side(lines[k + 1][4:], "a/"), "+++ " + _side(line[4:], "b/")]
            k += 2
            continue
        hunk = re.match(r"@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)", line, re.S)
        if hunk:
            out.append(f"@@ -{hunk.group(2)} +{hunk.group(1)} @@{hunk.group(3)}")
        elif line.startswith("+"):
            out.append("-" + line[1:])
        elif line.startswith("-"):
            out.append("+" + line[1:])
        elif line.startswith("new file mode"):
            out.append("deleted" + line[3:])
        elif line.startswith("deleted file mode"):
            out.append("new" + line[7:])
        else:
            out.append(line)
        k += 1
    return "".join(out)


def _side(name: str, prefix: str) -> str:
    """A ---/+++ file name moved to the other side: a/x <-> b/x, /dev/null kept."""
    if name.startswith(("a/", "b/")):
        return prefix + name[2:]
    return name


def swe_smith(row: dict) -> dict:
    """SWE-bench/SWE-smith: the base is the mirror's branch `instance_id` (the bug applied), the gold patch the
    inverse of the published bug."""
    iid, mirror, bug = need(row, "instance_id"), need(row, "repo"), need(row, "patch")
    out = {"instance_id": iid, "repo": mirror, "base_commit": iid, "patch": reverse_patch(bug), "test_patch": "",
           "problem_statement": row.get("problem_statement") or "", "hints_text": "",
           "FAIL_TO_PASS": test_ids(row, "FAIL_TO_PASS"), "PASS_TO_PASS": test_ids(row, "PASS_TO_PASS"),
           "version": "", "created_at": timestamp(row.get("created_at")), "environment_setup_commit": "",
           "source": "swe-smith", "image_name": row.get("image_name") or ""}
    if not out["FAIL_TO_PASS"]:
        raise BadRecord("FAIL_TO_PASS", "empty: nothing tells a fix from no fix")
    return out


def is_r2e_test_file(path: str) -> bool:
    """R2E-Gym's own rule for a test file (its FileDiff.is_test_file): the gold patch leaves these out."""
    parts = path.split("/")
    return (path.endswith("_test.py") or parts[-1].startswith("test_")
            or bool({"tests", "Tests", "test", "Test"} & set(parts)))


def file_diff(path: str, old: str, new: str) -> str:
    """A git-style unified diff of one file's old and new text (empty old: a new file; empty new: deleted)."""
    def lines(text: str) -> list[str]:
        out = text.splitlines(keepends=True)
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    head = f"diff --git a/{path} b/{path}\n"
    a, b = f"a/{path}", f"b/{path}"
    if not old:
        head, a = head + "new file mode 100644\n", "/dev/null"
    elif not new:
        head, b = head + "deleted file mode 100644\n", "/dev/null"
    body = "".join(difflib.unified_diff(lines(old), lines(new), a, b))
    return head + body if body else ""


def r2e_gym(row: dict) -> dict:
    """R2E-Gym/R2E-Gym-Subset: the commit's non-test Python diff is the gold patch, the hidden tests its test
    patch; FAIL_TO_PASS / PASS_TO_PASS split the tests expected to pass by the pre-fix log."""
    name, commit = need(row, "repo_name"), need(row, "commit_hash")
    if name not in R2E_REPOS:
        near = difflib.get_close_matches(name, R2E_REPOS, n=1)
        raise BadRecord("repo_name", f"{name!r} is not an R2E-Gym repository" + (f" (did you mean {near[0]!r}?)"
                                                                                 if near else ""))
    parsed, run = (_json_object(row, k) for k in ("parsed_commit_content", "execution_result_content"))
    expected = _json_object(row, "expected_output_json")
    diffs = parsed.get("file_diffs")
    if not isinstance(diffs, list):
        raise BadRecord("parsed_commit_content", "no file_diffs list")
    patch = ""
    for d in diffs:
        try:
            path = d["header"]["file"]["path"]
            old, new = d["old_file_content"], d["new_file_content"]
        except (KeyError, TypeError):
            raise BadRecord("parsed_commit_content", "a file diff without header.file.path / old_file_content / "
                            "new_file_content") from None
        if path.endswith(".py") and not is_r2e_test_file(path):
            patch += file_diff(path, old, new)
    if not patch:
        raise BadRecord("parsed_commit_content", "no non-test Python change: no gold patch")
    names, codes = run.get("test_file_names"), run.get("test_file_codes")
    if not isinstance(names, list) or not isinstance(codes, list) or len(names) != len(codes) or not names:
        raise BadRecord("execution_result_content", "test_file_names / test_file_codes missing or of other lengths")
    test_patch = "".join(file_diff(f"r2e_tests/{n}", "", c) for n, c in zip(names, codes, strict=True))
    before = _pytest_statuses(run.get("old_commit_res_stdout") or "")
    if not before:
        raise BadRecord("execution_result_content", "no pre-fix test log (old_commit_res_stdout): FAIL_TO_PASS "
                        "cannot be told from PASS_TO_PASS")
    f2p, p2p = [], []
    for key, status in sorted(expected.items()):
        if status != "PASSED":
            continue  # a test expected to fail after the fix grades nothing
        node = _node_id(key, names, codes)
        (p2p if before.get(key.split(" - ")[0]) == "PASSED" else f2p).append(node)
    if not f2p:
        raise BadRecord("expected_output_json", "no test fails before the fix and passes after it")
    owner_name = R2E_REPOS[name]
    return {"instance_id": row.get("instance_id") or f"{owner_name.replace('/', '__')}-{commit}",
            "repo": owner_name, "base_commit": str(parsed.get("old_commit_hash") or ""), "patch": patch,
            "test_patch": test_patch, "problem_statement": need(row, "problem_statement"), "hints_text": "",
            "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "version": "",
            "created_at": timestamp(parsed.get("commit_date")), "environment_setup_commit": "", "source": "r2e-gym",
            "docker_image": row.get("docker_image") or ""}


def _json_object(row: dict, field: str) -> dict:
    value = need(row, field, (str, dict))
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise BadRecord(field, f"not JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise BadRecord(field, f"expected a JSON object, got {type(value).__name__}")
    return value


def _pytest_statuses(log: str) -> dict[str, str]:
    """R2E-Gym's key for each test in a `pytest -rA` summary (`STATUS file::Class::test`): the node id after the
    file, joined by dots (how its expected_output_json names tests)."""
    out = {}
    for line in log.splitlines():
        m = re.match(r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+?\.py)::(\S+)", line.strip())
        if m:
            out[m.group(3).replace("::", ".")] = m.group(1)
    return out


def _node_id(key: str, names: list[str], codes: list[str]) -> str:
    """r2e_tests/FILE::Class::test for R2E-Gym's `Class.test` key: the hidden file that defines the test."""
    base, bracket, params = key.split(" - ")[0].partition("[")  # a parameter may hold dots: split before it
    parts = base.split(".")
    test = parts[-1]
    parts[-1] += bracket + params
    files = [n for n, c in zip(names, codes, strict=True) if re.search(rf"def {re.escape(test)}\b", c)]
    if len(names) == 1:
        files = names
    if len(files) != 1:
        raise BadRecord("expected_output_json", f"test {key!r} is defined in {len(files)} hidden test files")
    return f"r2e_tests/{files[0]}::" + "::".join(parts)


FORMATS: dict[str, Callable[[dict], dict]] = {"swe-gym": swe_gym, "swe-rebench": swe_rebench,
                                              "swe-smith": swe_smith, "r2e-gym": r2e_gym}
