"""`sandbox.checkouts`: a history-free checkout holds its base commit's reachable set, and the verifier refuses
every way something later can be left in one (issue 45, defect 2)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from swerl_jax.sandbox.checkouts import CheckoutError, HistoryLeak, history_free_checkout, verify_history_free

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": os.environ["PATH"], "HOME": "/nonexistent"}


def git(repo: pathlib.Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, check=True,
                          env=ENV).stdout.strip()


@pytest.fixture
def source(tmp_path) -> tuple[pathlib.Path, str, str]:
    """(a repository, its base commit, a later 'fix' commit): tags before and after the base, a branch on the fix."""
    repo = tmp_path / "source"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(3):
        (repo / "a.py").write_text(f"v = {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{i}")
        if i == 0:
            git(repo, "tag", "v1.0")  # light
            git(repo, "tag", "-a", "v1.0a", "-m", "annotated")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "a.py").write_text("v = 'fixed'\n")
    git(repo, "commit", "-q", "-am", "the fix")
    fix = git(repo, "rev-parse", "HEAD")
    git(repo, "tag", "-a", "v2.0", "-m", "after the base")
    git(repo, "branch", "later", fix)
    return repo / ".git", base, fix


def test_a_checkout_holds_the_base_its_ancestors_and_their_tags_only(source, tmp_path):
    git_dir, base, fix = source
    repo = tmp_path / "repo"
    history_free_checkout(git_dir, repo, base)
    assert git(repo, "rev-parse", "HEAD") == base
    assert set(git(repo, "rev-list", "--all").split()) == set(git(git_dir, "rev-list", base).split())
    assert len(git(repo, "rev-list", "--all").split()) == 3
    assert subprocess.run(["git", "-C", str(repo), "cat-file", "-e", fix], capture_output=True).returncode != 0
    assert sorted(git(repo, "tag").split()) == ["v1.0", "v1.0a"]  # v2.0 points after the base
    assert git(repo, "cat-file", "-t", "v1.0a") == "commit"  # annotated tags arrive as light ones
    assert git(repo, "describe", "--tags").startswith("v1.0")
    assert (repo / "a.py").read_text() == "v = 2\n"
    git_files = {p.name for p in (repo / ".git").iterdir()}
    assert not git_files & {"FETCH_HEAD", "ORIG_HEAD", "logs", "shallow", "packed-refs", "hooks"}


def test_a_name_that_is_not_a_full_hash_is_refused(source, tmp_path):
    git_dir, base, _ = source
    with pytest.raises(CheckoutError, match="full commit hash"):
        history_free_checkout(git_dir, tmp_path / "repo", "main")


def later_objects(git_dir: pathlib.Path, fix: str) -> list[str]:
    """The objects the fix commit added (itself, its tree, the changed blob)."""
    listing = git(git_dir, "rev-list", "--objects", "-1", fix, "--not", f"{fix}~1")
    return [line.split()[0] for line in listing.splitlines()]


def copy_loose(git_dir: pathlib.Path, repo: pathlib.Path, sha: str) -> None:
    """Write the object `sha` of `git_dir` into `repo`'s store as a loose object."""
    kind = git(git_dir, "cat-file", "-t", sha)
    content = subprocess.run(["git", "-C", str(git_dir), "cat-file", kind, sha], capture_output=True,
                             check=True).stdout
    subprocess.run(["git", "-C", str(repo), "hash-object", "-w", "-t", kind, "--stdin"], input=content,
                   check=True, capture_output=True)


@pytest.mark.parametrize("leak", ["loose_object", "pack", "ref", "packed_ref", "fetch_head", "orig_head", "reflog",
                                  "alternates", "shallow", "grafts", "remote", "gitfile", "head", "stray_pack"])
def test_the_verifier_refuses_every_later_trace(source, tmp_path, leak):
    git_dir, base, fix = source
    repo = tmp_path / "repo"
    history_free_checkout(git_dir, repo, base)
    dot = repo / ".git"
    if leak == "loose_object":
        copy_loose(git_dir, repo, fix)
    elif leak in ("pack", "stray_pack"):
        pack = subprocess.run(["git", "-C", str(git_dir), "pack-objects", str(tmp_path / "p")],
                              input="\n".join(later_objects(git_dir, fix)) + "\n", capture_output=True, text=True,
                              check=True).stdout.strip()
        shutil.copy(tmp_path / f"p-{pack}.pack", dot / "objects" / "pack")
        if leak == "pack":
            shutil.copy(tmp_path / f"p-{pack}.idx", dot / "objects" / "pack")
            os.rename(dot / "objects" / "pack" / f"p-{pack}.pack", dot / "objects" / "pack" / f"pack-{pack}.pack")
            os.rename(dot / "objects" / "pack" / f"p-{pack}.idx", dot / "objects" / "pack" / f"pack-{pack}.idx")
    elif leak == "ref":
        copy_loose(git_dir, repo, fix)  # the commit alone (its tree is missing): a ref may not name it
        (dot / "refs" / "heads" / "later").write_text(fix + "\n")
    elif leak == "packed_ref":
        (dot / "packed-refs").write_text(f"# pack-refs with: peeled fully-peeled sorted\n{fix} refs/heads/later\n")
    elif leak in ("fetch_head", "orig_head"):
        (dot / leak.upper()).write_text(f"{fix}\n")
    elif leak == "reflog":
        (dot / "logs").mkdir()
        (dot / "logs" / "HEAD").write_text(f"{base} {fix} t <t@example.invalid> 0 +0000\tcheckout\n")
    elif leak == "alternates":
        (dot / "objects" / "info" / "alternates").write_text(f"{git_dir / 'objects'}\n")
    elif leak == "shallow":
        (dot / "shallow").write_text(f"{base}\n")
    elif leak == "grafts":
        (dot / "info").mkdir(exist_ok=True)
        (dot / "info" / "grafts").write_text(f"{base} {fix}\n")
    elif leak == "remote":
        git(repo, "remote", "add", "origin", str(git_dir))
    elif leak == "gitfile":
        shutil.rmtree(dot)
        dot.write_text(f"gitdir: {git_dir}\n")
    elif leak == "head":
        git(repo, "checkout", "-q", "--detach", f"{base}~1")
    with pytest.raises(HistoryLeak):
        verify_history_free(repo, base)


def test_a_bundle_source_is_refused_not_leaked(source, tmp_path):
    """A bundle ignores what was asked and brings its whole pack: the verifier refuses the result."""
    git_dir, base, _ = source
    bundle = tmp_path / "all.bundle"
    git(git_dir, "bundle", "create", str(bundle), "--all")
    with pytest.raises(HistoryLeak, match="not reachable"):
        history_free_checkout(bundle, tmp_path / "repo", base)


def test_a_cached_store_is_copied_and_every_copy_is_verified(source, tmp_path):
    """The fetch is made once per base commit; each checkout copies it, and is verified itself: a store someone
    altered afterwards is refused in the copy."""
    git_dir, base, fix = source
    cache = tmp_path / "cache"
    history_free_checkout(git_dir, tmp_path / "one", base, cache)
    history_free_checkout(git_dir, tmp_path / "two", base, cache)
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1
    assert (tmp_path / "two" / "a.py").read_text() == "v = 2\n"
    assert git(tmp_path / "two", "status", "--porcelain") == ""
    one = sorted((tmp_path / "one" / ".git" / "objects").glob("??/*"))[0]  # a small fetch stays loose
    assert not os.path.samefile(one, tmp_path / "two" / one.relative_to(tmp_path / "one"))  # copies, not links
    store = next(p for p in cache.iterdir() if p.is_dir())
    (store / ".git" / "FETCH_HEAD").write_text(f"{fix}\n")
    with pytest.raises(HistoryLeak, match="FETCH_HEAD"):
        history_free_checkout(git_dir, tmp_path / "three", base, cache)


def test_the_store_cache_keeps_its_bound_and_never_evicts_a_store_in_use(source, tmp_path):
    """A Lite run left one store per instance (14 GB): past `cache_bytes` the least recently used go, except the
    one just built and one another checkout holds (its shared lock)."""
    import fcntl

    git_dir, base, _ = source
    first = git(git_dir, "rev-list", "--max-parents=0", "HEAD")
    second = git(git_dir, "rev-parse", f"{base}~1")
    cache = tmp_path / "cache"

    def stores() -> set[str]:
        return {p.name.split("-")[0] for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")}

    history_free_checkout(git_dir, tmp_path / "a", first, cache, cache_bytes=1)
    history_free_checkout(git_dir, tmp_path / "b", second, cache, cache_bytes=1)
    assert stores() == {second}  # over the bound: the older store went, the new one stays
    held = next(cache.glob(f"{second}-*.lock"))
    with open(held, "a") as lock:  # a checkout copying `second` right now
        fcntl.flock(lock, fcntl.LOCK_SH)
        history_free_checkout(git_dir, tmp_path / "c", base, cache, cache_bytes=1)
        assert stores() == {second, base}
    history_free_checkout(git_dir, tmp_path / "d", first, cache, cache_bytes=1)
    assert stores() == {first}
    stale = cache / f".{first}-00000000.deadbeef"  # a build a killed process left: removed at the next eviction
    (stale / ".git").mkdir(parents=True)
    (cache / f"{first}-00000000.lock").write_text("")
    history_free_checkout(git_dir, tmp_path / "e", base, cache)  # the default bound holds both
    assert stores() == {first, base} and not stale.exists()
    for name in "abcde":
        assert (tmp_path / name / ".git").is_dir()
    assert (tmp_path / "e" / "a.py").read_text() == "v = 2\n"
