"""Git access: clone names, PR recovery from history, diffs with renames, blobs, missing objects."""

import os
import subprocess

import pytest

from swerl_jax.curate.git_source import GitError, GitRepo, discover_clones, repo_name_from_dir
from tests.curate.builders import Repo, build_integration_history


def test_repo_names():
    assert repo_name_from_dir("psf__requests.git") == "psf/requests"
    assert repo_name_from_dir("pallets__flask") == "pallets/flask"
    assert repo_name_from_dir("my-org__my.repo") == "my-org/my.repo"
    assert repo_name_from_dir("noseparator") is None


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = Repo(tmp_path_factory.mktemp("g") / "o__r")
    r.commit("init", {"a.py": "x = 1\n" * 20, "b.txt": "hello\n"})
    r.commit("Rename a (#4)\n\nbody line", {}, ())
    r.git("mv", "a.py", "c.py")
    r.commit("Move a to c (#5)", {"c.py": "x = 1\n" * 19 + "x = 2\n"})
    r.merge_pr(6, "u/feature", "Add d", "Fixes #1", {"d.py": "d = 1\n"})
    r.commit("Not a PR: mentions (#7) in the middle")
    return r


def test_pr_candidates(repo):
    prs = {p["number"]: p for p in GitRepo(str(repo.path)).pr_candidates()}
    assert sorted(prs) == [4, 5, 6]
    assert prs[4]["kind"] == "git-squash" and prs[4]["title"] == "Rename a" and prs[4]["body"] == "body line"
    assert prs[6]["kind"] == "git-merge" and prs[6]["title"] == "Add d" and prs[6]["body"] == "Fixes #1"
    assert prs[6]["branch"] == "u/feature" and len(prs[6]["parents"]) == 2


def test_diff_raw_rename_and_blobs(repo):
    g = GitRepo(str(repo.path))
    try:
        head = repo.head()
        changes = g.diff_raw(f"{head}~3", f"{head}~2")  # the "Move a to c" commit
        assert len(changes) == 1 and changes[0].status == "R"
        assert (changes[0].old_path, changes[0].new_path) == ("a.py", "c.py")
        assert g.read_blob(changes[0].new_blob).endswith(b"x = 2\n")
        assert g.read_blob(changes[0].old_blob) == b"x = 1\n" * 20
        with pytest.raises(GitError) as e:
            g.read_blob("1" * 40)
        assert e.value.reason == "missing_object"
        assert g.read_blob(changes[0].old_blob) == b"x = 1\n" * 20  # the batch process survives a miss
        assert g.read_blob(changes[0].old_blob, max_bytes=10) is None  # skipped, stream stays in sync:
        assert g.read_blob(changes[0].new_blob, max_bytes=1000).endswith(b"x = 2\n")
        for a, b in ((f"{head}~3", f"{head}~2"), (repo.git("rev-list", "--max-parents=0", "HEAD"), head)):
            both, patch = g.diff(a, b)  # one call == the two separate ones
            assert both == g.diff_raw(a, b) and patch == g.diff_patch(a, b) and patch.startswith(b"diff --git")
    finally:
        g.close()


def test_bare_clone_and_not_a_repo(repo, tmp_path):
    bare = tmp_path / "o__r.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.path), str(bare)], check=True)
    assert sorted(p["number"] for p in GitRepo(str(bare)).pr_candidates()) == [4, 5, 6]
    (tmp_path / "x__y").mkdir()
    with pytest.raises(GitError) as e:
        GitRepo(str(tmp_path / "x__y")).pr_candidates()
    assert e.value.reason == "not_a_repository"
    assert [n for n, _ in discover_clones(tmp_path)] == ["o__r.git", "x__y"]
    with pytest.raises(FileNotFoundError, match="--clones"):
        discover_clones(tmp_path / "absent")


def test_missing_object_in_diff(repo, tmp_path):
    r = Repo(tmp_path / "m__m")
    r.commit("init", {"f.py": "a\n"})
    r.commit("change (#1)", {"f.py": "b\n"})
    blob = r.git("rev-parse", "HEAD:f.py")
    os.remove(r.path / ".git" / "objects" / blob[:2] / blob[2:])
    with pytest.raises(GitError) as e:
        GitRepo(str(r.path)).diff_patch("HEAD~1", "HEAD")
    assert e.value.reason == "missing_object"


def test_pr_candidates_behind_merges_and_repeated_numbers(tmp_path):
    """Issue 15: PRs squashed into an integration branch, merged as titled merges, rebased merges, on other
    branches; backports and cherry-picks that repeat a number count once, as the original commit."""
    info = build_integration_history(tmp_path / "o__r")
    cands = GitRepo(str(tmp_path / "o__r")).pr_candidates()
    numbers = [p["number"] for p in cands]
    assert sorted(numbers) == [10, 11, 12, 13, 14, 15]  # once each; not the revert, not refs/pull/99
    prs = {p["number"]: p for p in cands}
    # The squash on `features`, not the later cherry-pick that 1.x brought into main.
    assert prs[10]["merge_commit"] == info["pr10"] and prs[10]["kind"] == "git-squash"
    assert prs[10]["title"] == "Add feature" and prs[10]["body"] == "Fixes #9"
    # GitHub's merge of #11, not the branch commit inside it that repeats "(#11)".
    assert prs[11]["merge_commit"] == info["pr11"] and prs[11]["kind"] == "git-merge"
    assert prs[11]["branch"] == "u/eleven" and prs[11]["title"] == "Eleven"
    assert prs[12]["merge_commit"] == info["pr12"] and prs[12]["title"] == "[1.x] Add feature (#10)"
    assert prs[13]["merge_commit"] == info["pr13"] and prs[13]["kind"] == "git-merge"
    assert len(prs[13]["parents"]) == 2 and prs[13]["title"] == "Fix thirteen" and prs[13]["body"] == "Closes #3"
    assert prs[14]["merge_commit"] == info["pr14"] and prs[14]["kind"] == "git-squash"
    assert prs[14]["title"] == "Rebased fix" and prs[14]["branch"] == "u/rebased"
    assert prs[15]["merge_commit"] == info["pr15"]


def test_extract_pr_behind_merges(tmp_path):
    """The recovered PRs extract to their own change: #10 from its squash, #13 from its merge's second parent."""
    from swerl_jax.curate.extract import resolve_base_head

    info = build_integration_history(tmp_path / "o__r")
    g = GitRepo(str(tmp_path / "o__r"))
    try:
        prs = {p["number"]: p for p in g.pr_candidates()}
        assert resolve_base_head(g, prs[10]) == (info["init"], info["pr10"])
        changes, _ = g.diff(*resolve_base_head(g, prs[13]))
        assert [c.new_path for c in changes] == ["thirteen.py"]
    finally:
        g.close()
