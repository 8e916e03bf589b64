"""Red-team (issue 45, defect 8): git the host runs never runs a command a repository's files name, and the
Agentless scratch repository is written only inside its work tree."""

from __future__ import annotations

import subprocess
import tempfile

import pytest

from swerl_jax.eval.agentless.repair import git_diff


def _fsmonitor_config(marker) -> str:
    # git status / add / diff run core.fsmonitor through the shell: this command leaves a marker when it runs
    return f'[core]\n\tfsmonitor = "touch {marker}; echo"\n'


@pytest.mark.parametrize("path", [".git/config", "../escaped.py", "pkg/../../escaped.py", "pkg/.GIT/config",
                                  "./x.py", "{tmp}/abs.py"])
def test_git_diff_refuses_paths_outside_the_work_tree(tmp_path, monkeypatch, path):
    """`git_diff` wrote each path under a host scratch repository: `.git/config` made host git run a command, and
    `..` wrote beside the scratch repository."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    marker = tmp_path / "ran"
    path = path.format(tmp=tmp_path)  # an absolute path, inside this test's folder
    raised = None
    try:
        git_diff([path, "x.py"], [_fsmonitor_config(marker), "# x\n"], [_fsmonitor_config(marker), "# y\n"])
    except (ValueError, subprocess.CalledProcessError, OSError) as err:
        raised = err
    assert not marker.exists(), "host git ran a command named by a written config"
    assert not any((folder / "escaped.py").exists() for folder in (scratch, tmp_path))
    assert not (tmp_path / "abs.py").exists()
    assert isinstance(raised, ValueError), raised


def test_host_git_runs_no_hook_or_fsmonitor_of_the_repository(tmp_path):
    """A repository whose config names an fsmonitor command and a hooks folder: host git reads it, runs neither."""
    from swerl_jax.sandbox.hostgit import host_git

    repo = tmp_path / "repo"
    repo.mkdir()
    host_git(repo, "init", "-q", check=True)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text(f"#!/bin/sh\ntouch {tmp_path / 'hook-ran'}\n")
    (hooks / "pre-commit").chmod(0o755)
    with open(repo / ".git" / "config", "a") as f:
        f.write(_fsmonitor_config(tmp_path / "fsmonitor-ran") + f"\thooksPath = {hooks}\n")
    (repo / "a.py").write_text("a = 1\n")
    config = ("user.name=t", "user.email=t@localhost")
    for args in (("add", "a.py"), ("commit", "-q", "-m", "m"), ("status", "--short"), ("diff", "HEAD")):
        host_git(repo, *args, config=config, check=True, capture_output=True)
    assert not (tmp_path / "fsmonitor-ran").exists() and not (tmp_path / "hook-ran").exists()


def test_git_diff_still_diffs_nested_files(tmp_path):
    patch = git_diff(["pkg/mod.py"], ["a = 1\n"], ["a = 2\n"])
    assert "--- a/pkg/mod.py" in patch and "+a = 2" in patch
