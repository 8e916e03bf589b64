"""SWE-bench import on a test-made git repo, failure reports, instance file formats, and the CLI."""

import json
import subprocess

import pytest

from swerl_jax.data.__main__ import main
from swerl_jax.data.records import read_records, write_records
from swerl_jax.data.swebench import ImportFailure, import_instance, import_swebench, load_instances
from swerl_jax.data.synthetic import synthetic_records

OLD = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
NEW = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
HELPER = "VERSION = '1.0'\n"


def _git(cwd, *args):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def world(tmp_path):
    """clones/acme__calc with base commit B; the gold patch fixes add() and adds pkg/version.py."""
    repo = tmp_path / "clones" / "acme__calc"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "pkg" / "calc.py").write_text(OLD)
    (repo / "README").write_text("calc\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "pkg" / "calc.py").write_text(NEW)
    (repo / "pkg" / "version.py").write_text(HELPER)
    _git(repo, "add", ".")
    patch = _git(repo, "diff", "--cached", base)
    _git(repo, "commit", "-qm", "fix")
    (repo / "pkg" / "calc.py").write_text("# later work, uncommitted\n")  # the import must not read the tree
    instance = {"instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": base, "patch": patch,
                "problem_statement": "add() subtracts\n", "created_at": "2024-05-01T00:00:00Z",
                "test_patch": "diff --git a/t.py b/t.py\n"}
    return tmp_path, instance


def test_import_gives_the_expected_record(world):
    tmp, instance = world
    record = import_instance(instance, tmp / "clones")
    assert record == {
        "instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": instance["base_commit"],
        "problem_statement": "add() subtracts\n", "code_context": {"pkg/calc.py": OLD},
        "oracle_new_content": {"pkg/calc.py": NEW, "pkg/version.py": HELPER}, "oracle_patch": instance["patch"],
        "created_at": "2024-05-01T00:00:00Z", "source": "swe-bench", "test_patch": "diff --git a/t.py b/t.py\n",
    }
    # The clone is untouched: its own index and work tree still say what they said.
    assert "calc.py" in _git(tmp / "clones" / "acme__calc", "status", "--porcelain")


def test_bare_owner__name_dot_git_clones_are_found(world):
    """Curation accepts `owner__name.git` clone folders (git clone --bare's default name); so does the import."""
    tmp, instance = world
    bare = tmp / "bare"
    _git(tmp, "clone", "-q", "--bare", str(tmp / "clones" / "acme__calc"), str(bare / "acme__calc.git"))
    record = import_instance(instance, bare)
    assert record["oracle_new_content"] == {"pkg/calc.py": NEW, "pkg/version.py": HELPER}
    with pytest.raises(ImportFailure, match=r"clone missing: .*acme__calc \(or .*acme__calc.git\)"):
        import_instance(instance, tmp / "nowhere")


def test_failures_are_reported_with_reasons(world):
    tmp, good = world
    bad_patch = good["patch"].replace("-    return a - b", "-    return a / b")
    instances = [
        good,
        dict(good, instance_id="other__repo-1", repo="other/repo"),
        dict(good, instance_id="acme__calc-2", base_commit="0" * 40),
        dict(good, instance_id="acme__calc-3", patch=bad_patch),
        dict(good, instance_id="acme__calc-4", patch="not a patch"),
        dict(good, instance_id="acme__calc-5", problem_statement=""),
    ]
    failures = []
    records = list(import_swebench(instances, tmp / "clones", on_error=failures.append))
    assert [r["instance_id"] for r in records] == ["acme__calc-1"]
    assert {f.instance_id: f.reason for f in failures} == {
        "other__repo-1": "clone missing", "acme__calc-2": "base commit not in clone",
        "acme__calc-3": "patch does not apply", "acme__calc-4": "patch does not parse",
        "acme__calc-5": "missing field"}
    assert "pkg/calc.py" in str(next(f for f in failures if f.instance_id == "acme__calc-3"))
    with pytest.raises(ImportFailure, match="clone missing"):
        list(import_swebench(instances[1:2], tmp / "clones"))


def test_instance_file_formats(world, tmp_path):
    _, instance = world
    pa = pytest.importorskip("pyarrow", reason="parquet needs pyarrow (installed with the curate extra)")
    import pyarrow.parquet as pq

    (tmp_path / "i.json").write_text(json.dumps([instance]))
    (tmp_path / "i.jsonl").write_text(json.dumps(instance) + "\n")
    pq.write_table(pa.Table.from_pylist([instance]), tmp_path / "i.parquet")
    for name in ("i.json", "i.jsonl", "i.parquet"):
        assert load_instances(str(tmp_path / name)) == [instance], name
    with pytest.raises(FileNotFoundError):
        load_instances(str(tmp_path / "missing.jsonl"))


def test_real_instance_files_load_and_report_missing_clones(shared_data, tmp_path):
    lite = load_instances(str(shared_data / "swebench_lite.json"))
    verified = load_instances(str(shared_data / "swebench_verified.jsonl"))
    assert len(lite) == 300 and len(verified) == 500
    failures = []
    assert list(import_swebench(lite[:20], tmp_path, on_error=failures.append)) == []
    assert len(failures) == 20 and {f.reason for f in failures} == {"clone missing"}


def test_cli(world, tmp_path, capsys):
    tmp, instance = world
    (tmp_path / "inst.jsonl").write_text(json.dumps(instance) + "\n" + json.dumps(dict(instance, repo="x/y")) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["import-swebench", "--instances", str(tmp_path / "inst.jsonl"), "--clones", str(tmp / "clones"),
                 "--out", str(out)]) == 0
    assert "imported 1 of 2" in capsys.readouterr().out
    assert main(["validate", str(out)]) == 0 and "1 valid, 0 invalid" in capsys.readouterr().out
    ar = tmp_path / "out.arrayrecord"
    assert main(["convert", str(out), str(ar)]) == 0
    assert list(read_records(ar)) == list(read_records(out))
    mixed = tmp_path / "mixed.jsonl"
    write_records(mixed, synthetic_records(2))
    with open(mixed, "a") as f:
        f.write("{broken\n")
    assert main(["validate", str(mixed)]) == 1
    text = capsys.readouterr().out
    assert "2 valid, 1 invalid" in text and "malformed JSON" in text
    assert main(["stats", str(mixed), "--tokenizer"]) == 0
    text = capsys.readouterr().out
    assert "2 valid records, 1 invalid" in text and "prompt tokens:" in text
    assert main(["validate", str(tmp_path / "nope.jsonl")]) == 2


def test_an_import_that_imports_nothing_leaves_out_as_it_was(world, tmp_path, capsys):
    """A wrong --clones emptied an existing --out (held-out new-user check); a bundle is named with the fix."""
    _, instance = world
    (tmp_path / "inst.jsonl").write_text(json.dumps(instance) + "\n")
    out = tmp_path / "mine.jsonl"
    out.write_text("kept\n")
    args = ["import-swebench", "--instances", str(tmp_path / "inst.jsonl"), "--out", str(out)]
    assert main([*args, "--clones", str(tmp_path / "nosuch")]) == 2
    assert "--clones" in capsys.readouterr().err and out.read_text() == "kept\n"
    clones = tmp_path / "bundles"
    clones.mkdir()
    (clones / (instance["repo"].replace("/", "__") + ".bundle")).write_text("")
    assert main([*args, "--clones", str(clones)]) == 1
    printed = capsys.readouterr().out
    assert "not written" in printed and "is a bundle: make a clone of it first" in printed
    assert out.read_text() == "kept\n"
