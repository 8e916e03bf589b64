"""The patch fallback chain: git apply, then --reject, then patch --fuzz; a failed attempt leaves a clean tree."""

import pathlib
import shutil
import subprocess
import sys

import pytest

from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits
from swerl_jax.tasks.patching import apply_patch

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make install-dev)")
ORIGINAL = "".join(f"line {i}\n" for i in range(1, 21))


def git(repo: pathlib.Path, *args: str) -> str:
    argv = ["git", "-c", "safe.directory=*", "-C", str(repo), *args]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def checkout(tmp_path) -> tuple[Sandbox, pathlib.Path, pathlib.Path]:
    work = tmp_path / "work"
    repo = work / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "a.txt").write_text(ORIGINAL)
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return Sandbox(readable=[sys.base_prefix], limits=SandboxLimits(timeout_s=120)), work, repo


def diff_of(repo: pathlib.Path, new_text: str) -> str:
    (repo / "a.txt").write_text(new_text)
    patch = git(repo, "diff")
    git(repo, "checkout", "--", ".")
    return patch


def test_clean_patch_applies_with_git_apply(checkout):
    sandbox, work, repo = checkout
    patch = diff_of(repo, ORIGINAL.replace("line 5\n", "line five\n"))
    result = apply_patch(sandbox, work, repo, patch)
    assert result.applied and result.command == "git apply --verbose"
    assert "line five" in (repo / "a.txt").read_text()


def test_drifted_context_falls_back_to_patch_fuzz(checkout):
    sandbox, work, repo = checkout
    patch = diff_of(repo, ORIGINAL.replace("line 10\n", "line ten\n"))
    # The checkout drifted: a context line of the hunk changed, which git apply refuses and patch --fuzz accepts.
    (repo / "a.txt").write_text(ORIGINAL.replace("line 8\n", "line eight\n"))
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "drift")
    result = apply_patch(sandbox, work, repo, patch)
    assert result.applied and result.command == "patch --batch --fuzz=5 -p1 -i", result.log
    assert "line ten" in (repo / "a.txt").read_text() and "line eight" in (repo / "a.txt").read_text()


def test_patch_that_does_not_apply_leaves_the_checkout_clean(checkout):
    sandbox, work, repo = checkout
    bad = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n-nothing\n-like\n-this\n+x\n+y\n+z\n"
    result = apply_patch(sandbox, work, repo, bad)
    assert not result.applied and result.command is None
    assert result.log.count("$ ") >= 3  # every step of the chain was tried and logged
    assert (repo / "a.txt").read_text() == ORIGINAL and git(repo, "status", "--porcelain") == ""


def test_empty_patch_is_a_no_op(checkout):
    sandbox, work, repo = checkout
    assert apply_patch(sandbox, work, repo, "  \n").applied
    assert (repo / "a.txt").read_text() == ORIGINAL
