"""Issue 56: three patches that fix nothing in a real flask episode (pallets__flask-4992, from the bundle) and that
pytest's log graded resolved (reward 1.0 on the main of 2026-12-06, `tests/redteam/flask_attacks.py`): the
execution reward now comes from the trusted plugin's record (`sandbox/pytest_verdict.py`) and pays 0 for each, with
the log's verdict kept beside it; the detector names each patch as test infrastructure."""

import json
import shutil
import subprocess
import types

import pytest

from swerl_jax.agent.actions import format_action
from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.trainer import episode_metrics
from swerl_jax.eval.agentless import tests_gen
from swerl_jax.reward import test_infra
from swerl_jax.tasks import grading
from swerl_jax.tasks.environments import EnvironmentCache
from swerl_jax.tasks.executors import LocalExecutor
from tests.redteam.flask_attacks import ATTACKS, HELD_OUT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]


@pytest.fixture(scope="module")
def flask_4992(shared_data):
    lite = {r["instance_id"]: r for r in json.loads((shared_data / "swebench_lite.json").read_text())}
    return lite["pallets__flask-4992"]


def play(env: SWEEnv, files: dict[str, str], append: str) -> tuple[float, dict]:
    """An episode that writes the attack with the agent's own tools, then finishes."""
    env.reset()
    for path, text in files.items():
        obs, _, info = env.step(format_action("file_editor", command="create", path=path, file_text=text))
        assert not info["error"], obs
    if append:
        command = f"cat >> src/flask/__init__.py <<'SWERL_EOF'\n{append}SWERL_EOF"
        obs, _, info = env.step(format_action("execute_bash", command=command))
        assert not info["error"], obs
    env.step(format_action("finish"))
    return env.reward()


# What pytest's log said of each (the main of 2026-12-06 paid 1.0 for all three), and the plugin's status now.
EXPECTED = {"registered_hook": (True, "tampered"), "printed_results": (True, "missing"),
            "entry_point_plugin": (False, "unresolved")}  # autoload is off for both verdicts: it never loads


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_forged_pass_on_a_real_repository_pays_nothing(shared_data, flask_4992, tmp_path, attack):
    files, append = ATTACKS[attack]
    env = SWEEnv(flask_4992, shared_data / "repos", tmp_path, reward="execution", max_turns=5)
    try:
        reward, info = play(env, files, append)
    finally:
        env.close()
    log_resolved, plugin_status = EXPECTED[attack]
    assert reward == 0.0, info
    assert info["plugin_verdict"]["status"] == plugin_status, info["plugin_verdict"]
    assert info["log_resolved"] is log_resolved  # the official log grading, kept beside it
    assert info["status"] == {"missing": "error"}.get(plugin_status, plugin_status)
    assert info["test_infra_paths"], "the detector names the patch"
    assert test_infra.test_infra_paths(info["patch"], "pallets/flask") == info["test_infra_paths"]
    if attack == "registered_hook":
        assert any("pytest_runtest_makereport" in t and "src/flask/__init__.py" in t
                   for t in info["plugin_verdict"]["tampered"])
        rollout = types.SimpleNamespace(reward_info=info, reward=reward, token_mask=None, termination="finish")
        metrics = episode_metrics([rollout])
        assert metrics["agent/tampered_rate"] == 1.0 and metrics["agent/log_only_resolved_rate"] == 1.0


def _attack_patch(shared_data, instance: dict, tmp_path, files: dict[str, str], append: str) -> str:
    """The attack as a diff against the base commit (what a policy's final diff would be)."""
    repo = tmp_path / "attack"
    subprocess.run(["git", "clone", "-q", str(shared_data / "repos" / "pallets__flask.bundle"), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", instance["base_commit"]], check=True)
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    with open(repo / "src" / "flask" / "__init__.py", "a") as f:
        f.write(append)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    return subprocess.run(["git", "-C", str(repo), "diff", "--cached"], capture_output=True, text=True,
                          check=True).stdout


def test_agentless_regression_ranking_reads_the_record_not_the_log(shared_data, flask_4992, tmp_path):
    """Agentless's regression tests (and the agent's execution-based verifier, which ranks with them) ran the
    patched code's pytest and parsed its log: printed PASSED lines and an early exit passed every test."""
    executor = LocalExecutor(shared_data / "repos", tmp_path / "out", EnvironmentCache())
    regression = grading.test_list(flask_4992, "PASS_TO_PASS")[:5]
    script, files = tests_gen.check_script(flask_4992, [], run_regression=True)
    patch = _attack_patch(shared_data, flask_4992, tmp_path, *ATTACKS["printed_results"])
    (tmp_path / "logs").mkdir()
    ran = executor.run_script(flask_4992, patch, script, tmp_path / "logs", files)
    assert ran["status"] == "ran", ran
    _, from_log = tests_gen.read_check(flask_4992, ran["output"], 0, regression)
    _, from_record = tests_gen.read_check(flask_4992, ran["output"], 0, regression, ran["test_statuses"])
    # the log believed the printed lines (for the tests the attack found); the record, with none written, fails all
    assert len(from_log) < len(regression) and from_record == regression, (from_log, from_record)


@pytest.fixture(scope="module")
def plugin_executor(tmp_path_factory, shared_data):
    return LocalExecutor(shared_data / "repos", tmp_path_factory.mktemp("held_out"), EnvironmentCache(),
                         verdict="plugin")


@pytest.mark.parametrize("attack", sorted(HELD_OUT))
def test_a_held_out_red_teams_variants_pay_nothing(shared_data, flask_4992, tmp_path, plugin_executor, attack):
    """The first version of the plugin graded each of these resolved: the hook caller's executor, a module that
    claims to be a conftest, an imperative xfail, a conftest.py (now the base commit's for RL verdicts), the token
    read and the real record spoiled (the log of the same run must agree), a .pth planted in the thin venv before
    pytest is started again (the venv is read-only while tests run)."""
    patch = _attack_patch(shared_data, flask_4992, tmp_path, *HELD_OUT[attack])
    (tmp_path / "logs").mkdir()
    result = plugin_executor.evaluate(flask_4992, patch, tmp_path / "logs")
    assert result["status"] != "resolved" and not result["resolved"], result
