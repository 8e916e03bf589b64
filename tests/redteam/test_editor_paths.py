"""The editor's host work per path (issue 30's hard bounds): `Confined` walks a path one component at a time on the
host, and `create` makes every missing folder. A turn is up to 1,048,576 characters, so one `create` of
"a/a/a/.../x" (500,000 components) made the host build 500,000 nested folders, with work quadratic in the depth
(each step formatted the path so far): the turn did not finish in 10 minutes, and removing the tree took 2.5
minutes more. Nothing polled the work dir's quota in between (only commands are polled), and a tree deeper than the
quota's walk counts as over it. Now a path deeper than `confined.MAX_PATH_PARTS` or longer than PATH_MAX is an
error observation, before anything is made."""

from __future__ import annotations

import pathlib

import pytest

from swerl_jax.agent.actions import format_action, parse_action
from swerl_jax.agent.tools import ToolError, Workspace


@pytest.fixture
def workspace(tmp_path) -> Workspace:
    (tmp_path / "repo").mkdir()
    return Workspace(tmp_path / "repo", tmp_path, sandbox=None)  # the editor needs no sandbox


def _deepest(root: pathlib.Path) -> int:
    depth = 0
    while (root / "a").is_dir():
        root, depth = root / "a", depth + 1
    return depth


@pytest.mark.parametrize("command", ["create", "view", "str_replace", "insert", "undo_edit"])
def test_a_deep_path_is_refused_before_the_host_walks_it(workspace, command):
    params = {"create": {"file_text": "x"}, "str_replace": {"old_str": "a", "new_str": "b"},
              "insert": {"insert_line": "0", "new_str": "x"}}.get(command, {})
    action = parse_action(format_action("file_editor", command=command, path="a/" * 300 + "x", **params))
    with pytest.raises(ToolError, match="deep|long"):
        workspace.call(action)
    assert _deepest(workspace.repo) == 0


def test_a_path_longer_than_path_max_is_refused(workspace):
    action = parse_action(format_action("file_editor", command="create", path="n" * 200 + "/" + "m" * 5_000,
                                        file_text="x"))
    with pytest.raises(ToolError, match="long"):
        workspace.call(action)
    assert not (workspace.repo / ("n" * 200)).exists()


def test_ordinary_nested_paths_still_work(workspace):
    path = "/".join(["pkg"] * 40) + "/mod.py"
    assert workspace.call(parse_action(format_action("file_editor", command="create", path=path,
                                                     file_text="x = 1"))).startswith("Created")
    assert (workspace.repo / path).read_text() == "x = 1"


def test_editor_writes_count_against_the_work_dirs_quota(tmp_path):
    """The editor writes on the host, between commands, where no quota poll runs: editor-only turns added up to
    8 MiB each past the quota unseen. Now a write that leaves the work dir over it ends the episode like a
    command that does (`Workspace.over_quota`)."""
    from swerl_jax.sandbox.bwrap import SandboxLimits

    (tmp_path / "repo").mkdir()
    workspace = Workspace(tmp_path / "repo", tmp_path, sandbox=None, step_limits=SandboxLimits(disk_bytes=3 << 20))
    workspace.create("a.txt", "x" * (1 << 20))
    assert not workspace.over_quota
    workspace.create("b.txt", "y" * (1 << 20))
    assert not workspace.over_quota
    workspace.create("c.txt", "z" * (2 << 20))
    assert workspace.over_quota
