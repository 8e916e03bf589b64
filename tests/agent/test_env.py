"""The SWE environment: turn accounting and terminations on a checkout; a scripted agent that makes the gold
edit through the tools resolves a flask instance (graded by the harness, slow)."""

import json
import shutil
import subprocess
import time

import pytest

from swerl_jax.agent.actions import format_action
from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.tools import Workspace
from swerl_jax.eval.agentless.scripted import patch_edits
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="module")
def flask_4045(shared_data):
    lite = {r["instance_id"]: r for r in json.loads((shared_data / "swebench_lite.json").read_text())}
    return lite["pallets__flask-4045"]


def test_turns_errors_and_max_turns(shared_data, flask_4045, tmp_path):
    env = SWEEnv(flask_4045, shared_data / "repos", tmp_path, max_turns=3)
    work = tmp_path / "w"
    work.mkdir()
    subprocess.run(["git", "clone", "-q", str(shared_data / "repos" / "pallets__flask.bundle"), str(work / "repo")],
                   check=True)
    limits = SandboxLimits(timeout_s=30, cpu_seconds=60, processes=64, memory_bytes=1 << 30)
    env.workspace, env._started = Workspace(work / "repo", work, Sandbox(limits=limits), step_limits=limits), \
        time.monotonic()
    obs, done, info = env.step("I think the bug is in blueprints.py")  # no call: an error observation
    assert obs.startswith("ERROR: No function call found") and not done and info["error"]
    obs, done, info = env.step(format_action("search", search_term="class Blueprint", path="src"))
    assert "src/flask/blueprints.py" in obs and not done and not info["error"]
    obs, done, info = env.step(format_action("execute_bash", command="ls"))
    assert done and info["termination"] == "max_turns"
    assert (env.stats.turns, env.stats.tool_errors) == (3, 1)
    with pytest.raises(RuntimeError, match="has ended"):
        env.step(format_action("finish"))


@pytest.mark.slow
def test_scripted_agent_with_the_gold_edit_resolves_flask(shared_data, flask_4045, tmp_path):
    env = SWEEnv(flask_4045, shared_data / "repos", tmp_path, reward="execution", max_turns=10)
    try:
        task = env.reset()
        assert flask_4045["problem_statement"][:60] in task and "<function=" in task
        assert not (env.workspace.repo / "tests" / "test_blueprints.py").read_text().count("dotted_name_not_allowed")
        for path, search, replace in patch_edits(flask_4045["patch"]):
            obs, done, info = env.step(format_action("file_editor", command="str_replace", path=path,
                                                     old_str=search, new_str=replace))
            assert not info["error"], obs
        obs, done, info = env.step(format_action("execute_bash",
                                                 command="python -c 'import flask; print(flask.__file__)'"))
        assert "src/flask/__init__.py" in obs and "[exit code 0]" in obs  # the checkout is what is installed
        obs, done, info = env.step(format_action("finish"))
        assert done and info["termination"] == "finish"
        reward, detail = env.reward()
        assert reward == 1.0, detail
        assert detail["FAIL_TO_PASS"]["passed"] == 2
        env.reward_kind = "similarity"
        similarity, _ = env.reward()
        assert similarity == pytest.approx(1.0)  # the same hunks, headers included (python diff driver)
    finally:
        env.close()
