"""The tools on a real checkout (flask), hostile commands included: no network, no write outside the work dir,
fork bombs and endless commands end, huge outputs are cut, paths cannot leave the repository."""

import os
import shutil
import subprocess

import pytest

from swerl_jax.agent.actions import Action
from swerl_jax.agent.tools import ToolError, Workspace
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture()
def ws(shared_data, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "clone", "-q", str(shared_data / "repos" / "pallets__flask.bundle"), str(work / "repo")],
                   check=True)
    subprocess.run(["git", "-C", str(work / "repo"), "-c", "advice.detachedHead=false", "checkout", "-q",
                    "d8c37f43724cd9fb0870f77877b7c4c7e38a19e0"],
                   check=True)
    limits = SandboxLimits(memory_bytes=1 << 30, cpu_seconds=30, processes=64, timeout_s=20)
    return Workspace(work / "repo", work, Sandbox(limits=limits), step_limits=limits)


def test_editor_view_create_replace_insert_undo_and_the_diff(ws):
    assert "src/" in ws.view(".") and "     1\t" in ws.view("src/flask/blueprints.py", "1 3")
    out = ws.str_replace("src/flask/blueprints.py", "        self.name = name\n",
                         "        if '.' in name:\n            raise ValueError('dot')\n        self.name = name\n")
    assert "raise ValueError('dot')" in out
    with pytest.raises(ToolError, match="occurs 0 times"):
        ws.str_replace("src/flask/blueprints.py", "no such text", "x")
    with pytest.raises(ToolError, match="exactly once"):
        ws.str_replace("src/flask/blueprints.py", "self", "this")
    ws.create("src/flask/new_mod.py", "X = 1\n")
    ws.insert("src/flask/new_mod.py", "1", "Y = 2")
    assert (ws.repo / "src/flask/new_mod.py").read_text() == "X = 1\nY = 2\n"
    diff = ws.diff("HEAD")
    assert "+            raise ValueError('dot')" in diff and "new file mode" in diff and "+Y = 2" in diff
    ws.undo_edit("src/flask/new_mod.py")
    ws.undo_edit("src/flask/new_mod.py")
    assert not (ws.repo / "src/flask/new_mod.py").exists()
    assert "search" not in ws.search("raise ValueError('dot')", "src").lower()
    assert "src/flask/blueprints.py:" in ws.search("raise ValueError('dot')", "src")


def test_paths_cannot_leave_the_repository(ws, tmp_path):
    for path in ("../outside.py", "/etc/passwd", "src/../../outside.py", ".git/config"):
        with pytest.raises(ToolError):
            ws.create(path, "x")
    os.symlink("/etc", ws.repo / "etc_link")
    with pytest.raises(ToolError, match="etc_link: is a symbolic link"):
        ws.call(Action("file_editor", {"command": "view", "path": "etc_link/passwd"}))


def test_hostile_commands(ws):
    net = ws.bash("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), 3)\"")
    assert "exit code 0" not in net and ("Network is unreachable" in net or "Errno" in net)
    outside = ws.bash("touch /etc/agent_was_here; touch /work_outside; echo done")
    assert not os.path.exists("/etc/agent_was_here") and "Read-only file system" in outside
    bomb = ws.bash(":(){ :|:& };:")  # the process limit stops it; the step's timeout kills what is left
    assert "exit code" in bomb or "timed out" in bomb
    quick = SandboxLimits(memory_bytes=1 << 30, cpu_seconds=30, processes=64, timeout_s=3)
    hang = Workspace(ws.repo, ws.work, ws.sandbox, step_limits=quick).bash("sleep 1000")
    assert "timed out after 3 s" in hang
    huge = ws.bash("yes 0123456789 | head -c 5000000")
    assert len(huge) < 9000 and "characters cut" in huge
    for refused in ("pip install requests", "python -m pip install x", "python -m http.server 8000",
                    "sleep 5 &", "nohup sleep 5"):
        with pytest.raises(ToolError, match="refused"):
            ws.bash(refused)


def test_call_dispatches_and_names_missing_editor_arguments(ws):
    assert "[exit code 0]" in ws.call(Action("execute_bash", {"command": "git status --short | wc -l"}))
    with pytest.raises(ToolError, match="needs"):
        ws.call(Action("file_editor", {"command": "create", "path": "a.py"}))
