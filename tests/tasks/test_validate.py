"""Validation's keep/drop rules and its cache, on a throwaway repository (tests/tasks/fake_executor.py runs its
tests in-process: a real environment build takes minutes)."""

from __future__ import annotations

import json
import pathlib

import pytest

from swerl_jax.data.swebench import load_instances
from swerl_jax.tasks import grading, infer_spec, mutations, output, sources, statements, validate
from tests.tasks.fake_executor import InProcessExecutor, make_repo


@pytest.fixture()
def setup(tmp_path: pathlib.Path):
    source = make_repo(tmp_path / "src")
    repos = tmp_path / "repos"
    git_dir = sources.task_repo(source / ".git", repos, "acme/calc")
    snap = sources.Snapshot.read(git_dir, "HEAD")
    spec = infer_spec.infer_spec({"pyproject.toml": (source / "pyproject.toml").read_text()}, "2025-01-01")
    target = validate.Target("acme/calc", git_dir, snap.commit, "2025-01-01T00:00:00Z", spec, snap)
    found = mutations.file_mutations("calc.py", snap.files["calc.py"])

    def pick(kind: str, function: str) -> mutations.Mutation:
        return next(m for m in found if m.kind == kind and m.function == function)
    return target, repos, pick, tmp_path / "out"


def test_a_bug_that_breaks_a_test_is_kept_as_a_swebench_shaped_task(setup):
    target, repos, pick, out = setup
    assert target.snapshot.tests_for("calc.py") == ["tests/test_calc.py"]
    bug = pick("wrong_arithmetic", "add")
    row = validate.Validator(target, InProcessExecutor(repos), out).validate(bug)
    assert row["kept"], row["reason"]
    inst = row["instance"]
    assert grading.test_list(inst, "FAIL_TO_PASS") == ["tests/test_calc.py::test_add"]
    assert grading.test_list(inst, "PASS_TO_PASS") == ["tests/test_calc.py::test_big", "tests/test_calc.py::test_small"]
    assert (row["checks"]["gold"], row["checks"]["empty"]) == ("resolved", "unresolved")
    # the task commit holds the bug and not the hidden tests; the test patch adds them back
    files = sources.git(target.git_dir, "ls-tree", "-r", "--name-only", inst["base_commit"]).split()
    assert "tests/test_calc.py" not in files and "a - b" in sources.git(target.git_dir, "show",
                                                                         f"{inst['base_commit']}:calc.py")
    assert "+++ b/tests/test_calc.py" in inst["test_patch"] and inst["patch"] == bug.gold_patch()
    assert inst["mutation"]["kind"] == "wrong_arithmetic" and inst["source"] == "mutation"
    assert inst["spec"]["python"] and inst["created_at"] and statements.leaks(inst["problem_statement"],
                                                                             inst["patch"]) == []
    path = out / "one.jsonl"
    path.write_text(json.dumps(inst) + "\n")
    assert load_instances(path)[0]["instance_id"] == inst["instance_id"]


def test_drops_a_bug_no_test_sees_and_one_whose_gold_does_not_resolve(setup):
    target, repos, pick, out = setup
    unseen = validate.Validator(target, InProcessExecutor(repos), out).validate(pick("wrong_arithmetic", "unused"))
    assert not unseen["kept"] and "no test" in unseen["reason"]
    flaky = validate.Validator(target, InProcessExecutor(repos, gold_unresolved=True), out / "b")
    row = flaky.validate(pick("inverted_condition", "is_small"))
    assert not row["kept"] and "gold patch does not resolve" in row["reason"]


def test_infrastructure_failures_are_never_cached_and_decided_ones_are(setup):
    target, repos, pick, out = setup
    bugs = [pick("wrong_arithmetic", "add"), pick("inverted_condition", "is_small")]
    for fail in ("script", "evaluate"):
        broken = validate.Validator(target, InProcessExecutor(repos, fail=fail), out)
        counts = broken.run(bugs, progress=False)
        assert counts["infra"] == 2 and counts["kept"] == 0
        assert not (out / "results.jsonl").exists() and (out / "errors.jsonl").read_text().count("\n") >= 2
    healthy = InProcessExecutor(repos)
    assert validate.Validator(target, healthy, out).run(bugs, workers=2, progress=False)["kept"] == 2
    again = InProcessExecutor(repos)
    counts = validate.Validator(target, again, out).run(bugs, progress=False)
    assert counts == {"kept": 2, "dropped": 0, "infra": 0, "skipped": 2} and again.calls == []
    # another executor fingerprint (a changed spec, limits or plugin) is another key: decided again
    other = dict(target.spec, python="3.8")
    moved = validate.Validator(validate.Target(**{**target.__dict__, "spec": other}), InProcessExecutor(repos), out)
    assert moved.run(bugs[:1], progress=False)["skipped"] == 0


def test_collected_instances_split_by_file(setup):
    target, repos, pick, out = setup
    validator = validate.Validator(target, InProcessExecutor(repos), out)
    rows = [validator.validate(m) for m in (pick("wrong_arithmetic", "add"), pick("inverted_condition", "is_small"))]
    kept = [r["instance"] for r in rows]
    train, held = output.split_by_file(kept, heldout_fraction=0.5)
    assert len(train) + len(held) == 2 and (train == [] or held == [])  # one file: one side
