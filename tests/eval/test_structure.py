"""A repository's structure at a commit, from git objects (bare clone, no checkout)."""

import subprocess

from swerl_jax.eval.structure import file_contents, read_tree, repo_structure


def make_repo(tmp_path):
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "mod.py").write_text("class A:\n    def m(self):\n        pass\n\n\nasync def f():\n    pass\n")
    (work / "old.py").write_text("print 'python 2'\n")
    (work / "README.md").write_text("hi\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (work / "pkg" / "mod.py").write_text("changed = 1\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare, commit


def test_structure_at_an_old_commit_of_a_bare_clone(tmp_path):
    bare, commit = make_repo(tmp_path)
    s = repo_structure(bare, commit)
    assert set(s) == {"pkg", "old.py"}  # Python files only
    mod = s["pkg"]["mod.py"]
    assert mod["classes"] == [{"name": "A", "start_line": 1, "end_line": 3,
                               "methods": [{"name": "m", "start_line": 2, "end_line": 3}]}]
    assert mod["functions"] == [{"name": "f", "start_line": 6, "end_line": 7}]
    assert s["old.py"]["classes"] == [] and s["old.py"]["text"] == ["print 'python 2'"]  # does not parse: text kept
    assert file_contents(s)["pkg/mod.py"].startswith("class A:")
    assert "README.md" in read_tree(bare, commit)
