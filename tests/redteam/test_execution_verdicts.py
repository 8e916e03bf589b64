"""Issue 56: three patches that fix nothing in a real flask episode (pallets__flask-4992, from the bundle) and that
pytest's log graded resolved (reward 1.0 on the main of 2026-12-06, `tests/redteam/flask_attacks.py`): the
execution reward now comes from the trusted plugin's record (`sandbox/pytest_verdict.py`) and pays 0 for each, with
the log's verdict kept beside it; the detector names each patch as test infrastructure."""

import json
import shutil
import types

import pytest

from swerl_jax.agent.actions import format_action
from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.trainer import episode_metrics
from swerl_jax.reward import test_infra
from tests.redteam.flask_attacks import ATTACKS

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
