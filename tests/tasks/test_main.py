"""The generate CLI's glue on a throwaway repository (its executor swapped for the in-process one), and the
candidate generation on a fetched mirror (skipped when absent)."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from swerl_jax.tasks import __main__ as cli
from swerl_jax.tasks import generation, sources
from tests.tasks.fake_executor import InProcessExecutor, make_repo

MIRRORS = pathlib.Path(os.environ.get("SWERL_JAX_MIRRORS", "/work/.mirror"))


def test_repo_names_from_paths():
    assert generation.repo_name(pathlib.Path("/m/pytoolz+toolz/repo"), None) == "pytoolz/toolz"
    assert generation.repo_name(pathlib.Path("/r/pallets__flask.bundle"), None) == "pallets/flask"
    with pytest.raises(ValueError, match="pass --name owner/name"):
        generation.repo_name(pathlib.Path("/r/plain"), None)


def test_generate_resumes_and_collects_instances_split_report_and_table(tmp_path: pathlib.Path):
    source = make_repo(tmp_path / "src")
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "swebench_lite.json").write_text("[]")
    (bench / "swebench_verified.jsonl").write_text("")
    args = cli.build_parser().parse_args(["generate", "--repo", str(source / ".git"), "--name", "acme/calc",
                                          "--commit", "HEAD", "--out", str(tmp_path / "out"), "--pairs", "1",
                                          "--benchmarks", str(bench), "--spec", '{"python": "3.11"}'])
    validator, ordered = generation.prepare(args)
    assert validator.target.spec["python"] == "3.11" and validator.target.spec["inferred"]["overridden"] == ["python"]
    assert {m.function for m in ordered} >= {"add", "is_small"} and "unused" not in {m.function for m in ordered}
    validator.executor = InProcessExecutor(tmp_path / "out" / "repos")
    counts = validator.run(ordered, want=2, progress=False)
    assert counts["kept"] == 2
    summary = generation.collect(tmp_path / "out", bench, 0.2, 0)
    assert summary["kept"] == 2 and summary["train"] + summary["heldout"] == 2
    rows = (tmp_path / "out" / "instances.jsonl").read_text().splitlines()
    assert {json.loads(r)["repo"] for r in rows} == {"acme/calc"}
    assert json.loads((tmp_path / "out" / "contamination.json").read_text())["swebench_lite"]["files"] == []
    assert "acme/calc" in (tmp_path / "out" / "table.md").read_text()


@pytest.mark.skipif(not (MIRRORS / "pytoolz+toolz" / "repo").is_dir(), reason="no fetched toolz mirror "
                    f"under {MIRRORS} (fetch github:pytoolz/toolz)")
def test_a_real_mirror_yields_candidates_with_their_tests():
    snap = sources.Snapshot.read(MIRRORS / "pytoolz+toolz" / "repo", "568c2b8393973cd172a466546c9d95779c452438")
    assert "toolz/tests/test_itertoolz.py" in snap.tests_for("toolz/itertoolz.py")
    assert not any(sources.is_test_file(p) for p in snap.source_files())


def test_revert_validates_records_once_and_collects_them(tmp_path: pathlib.Path, monkeypatch):
    from swerl_jax.data.records import write_records
    from swerl_jax.tasks import mutations
    from tests.tasks.fake_executor import CALC, TESTS

    source = make_repo(tmp_path / "src")
    repos = tmp_path / "repos"
    repos.mkdir()
    (repos / "acme__calc.git").symlink_to(source / ".git")
    commit = sources.git(source / ".git", "rev-parse", "HEAD").strip()
    new_tests = TESTS + "\n\ndef test_add_default():\n    assert add(4) == 4\n"
    record = {"instance_id": "acme__calc-7", "repo": "acme/calc", "base_commit": commit, "problem_statement": "p",
              "code_context": {"calc.py": CALC}, "oracle_new_content": {"calc.py": CALC.replace("b):", "b=0):")},
              "oracle_patch": mutations.unified_diff("calc.py", CALC, CALC.replace("b):", "b=0):")),
              "test_patch": mutations.unified_diff("tests/test_calc.py", TESTS, new_tests),
              "created_at": "2025-01-01T00:00:00Z", "source": "pr"}
    write_records(tmp_path / "records.jsonl", [record])
    fake = InProcessExecutor(repos)
    monkeypatch.setattr(generation, "make_executor", lambda args, repos: fake)
    monkeypatch.setattr(generation, "DEFAULT_BENCHMARKS", tmp_path / "bench")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "swebench_lite.json").write_text("[]")
    (tmp_path / "bench" / "swebench_verified.jsonl").write_text("")
    argv = ["revert", "--records", str(tmp_path / "records.jsonl"), "--repos", str(repos), "--out",
            str(tmp_path / "out")]
    assert cli.main(argv)["kept"] == 1
    calls = len(fake.calls)
    assert cli.main(argv)["kept"] == 1 and len(fake.calls) == calls  # resumed: nothing re-run
    fake.fingerprint = lambda instance: {"executor": "another"}  # decided again under a new key: counted once
    assert cli.main(argv)["kept"] == 1 and len(fake.calls) > calls
    row = json.loads((tmp_path / "out" / "instances.jsonl").read_text())
    assert row["source"] == "reverted_pr"
    assert json.loads(row["FAIL_TO_PASS"]) == ["tests/test_calc.py::test_add_default"]
