"""Agentless Mini end to end with the oracle backend (the gold edits in search/replace form): localization ->
repair -> rerank gives back exactly the gold change; through the CLI, the sandboxed reproduction and regression
tests and the harness, a flask instance resolves (slow)."""

import json
import shutil
import subprocess

import pytest

from swerl_jax.eval import run as eval_run
from swerl_jax.eval.agentless import pipeline, scripted

FLASK = ("pallets__flask-4045", "pallets__flask-4992", "pallets__flask-5063")


@pytest.fixture(scope="module")
def flask(shared_data, tmp_path_factory):
    lite = {r["instance_id"]: r for r in json.loads((shared_data / "swebench_lite.json").read_text())}
    bare = tmp_path_factory.mktemp("flask") / "flask.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(shared_data / "repos" / "pallets__flask.bundle"), str(bare)],
                   check=True)
    return [lite[i] for i in FLASK], bare


def applied(bare, tmp_path, commit, patch):
    """The `git diff` of a fresh checkout at `commit` after applying `patch`."""
    work = tmp_path / "wt"
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(bare), str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "checkout", "-q", commit], check=True)
    (tmp_path / "p.diff").write_text(patch)
    subprocess.run(["git", "-C", str(work), "apply", str(tmp_path / "p.diff")], check=True)
    return subprocess.run(["git", "-C", str(work), "diff"], capture_output=True, text=True, check=True).stdout


def test_oracle_answers_give_back_the_gold_change(flask, tmp_path):
    instances, bare = flask
    chat = scripted.OracleChat(instances)
    for inst in instances:
        traj = pipeline.run_instance(inst, bare, chat, len, pipeline.AgentlessSettings(num_samples=3))
        assert all(loc["found_files"] for loc in traj["localization"])
        patch = traj["prediction"]["model_patch"]
        assert patch and traj["chosen_sample"] == 0
        assert applied(bare, tmp_path, inst["base_commit"], patch) == \
            applied(bare, tmp_path, inst["base_commit"], inst["patch"]), inst["instance_id"]


def test_a_failing_instance_is_its_own_record(flask, tmp_path):
    instances, _ = flask
    bad = {**instances[0], "instance_id": "nowhere__repo-1", "repo": "nowhere/repo"}
    made = pipeline.run_instances([bad], tmp_path / "repos", tmp_path / "out", scripted.OracleChat([bad]), len,
                                  pipeline.AgentlessSettings(num_samples=1), progress=False)
    (failed,) = made  # its error, and no prediction: an empty patch would be graded as the model's failure
    assert failed["instance_id"] == "nowhere__repo-1" and "nowhere" in failed["error"]
    assert "nowhere" in json.loads((tmp_path / "out" / "trajectories" / "nowhere__repo-1.json").read_text())["error"]
    assert not (tmp_path / "out" / "predictions.jsonl").exists()
    again = pipeline.run_instances([bad], tmp_path / "repos", tmp_path / "out", scripted.OracleChat([bad]), len,
                                   pipeline.AgentlessSettings(num_samples=1), progress=False)
    assert [m["instance_id"] for m in again] == ["nowhere__repo-1"]  # tried again on resume, not skipped


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_cli_oracle_with_sandboxed_tests_resolves_a_flask_instance(shared_data, tmp_path, capsys):
    repro = ("from flask import Blueprint\ntry:\n    Blueprint('a.b', __name__)\n    print('Issue reproduced')\n"
             "except ValueError:\n    print('Issue resolved')\n")
    original = scripted.OracleChat.__init__

    def with_script(self, instances, reproduction_scripts=None):
        original(self, instances, {"pallets__flask-4045": repro})

    mp = pytest.MonkeyPatch()
    mp.setattr(scripted.OracleChat, "__init__", with_script)
    try:
        result = eval_run.main(["--config", "experiments/eval_agentless_mini.py:cpu", "--out", str(tmp_path / "out"),
                                "--config.backend=oracle", "--config.instance_ids=pallets__flask-4045",
                                "--config.precheck=static",  # no extra grading of the empty patch (test time)
                                f"--config.instances={shared_data / 'swebench_lite.json'}",
                                f"--config.repos={shared_data / 'repos'}", "--no-progress"])
    finally:
        mp.undo()
    assert capsys.readouterr().out.strip().splitlines()[-1] == ("resolved 1/1 (unresolved 0, empty patch 0, error 0, "
                                                              "no prediction 0)")
    assert result["report"]["instances"]["pallets__flask-4045"]["status"] == "resolved"
    traj = json.loads((tmp_path / "out" / "trajectories" / "pallets__flask-4045.json").read_text())
    tests = traj["tests"]
    assert tests["outcomes_on_original"] == ["reproduced"] and tests["kept"] == [0]
    assert len(tests["regression_tests"]) == 50  # flask-4045's PASS_TO_PASS, all passing on the original
    assert tests["per_patch"] == {"0": {"regression_failures": 0, "reproduction_passed": ["0"]}}
    # the predictions say they are the gold patches, not a model (issue 31.2)
    preds = [json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    assert {p["model_name_or_path"] for p in preds} == {"oracle-gold-patches"}
    # another backend into the same --out is refused before anything runs, naming the key: its report would have
    # been the oracle's resolved 1/1
    with pytest.raises(ValueError, match=r"holds results of another config \(backend: 'oracle' -> 'engine'"):
        eval_run.main(["--config", "experiments/eval_agentless_mini.py:cpu", "--out", str(tmp_path / "out"),
                       "--config.backend=engine", "--config.instance_ids=pallets__flask-4045",
                       "--config.precheck=static",
                       f"--config.instances={shared_data / 'swebench_lite.json'}",
                       f"--config.repos={shared_data / 'repos'}", "--no-progress"])


def test_a_model_that_localizes_nothing_is_an_empty_prediction_with_its_reason_never_retried(flask, shared_data,
                                                                                           tmp_path):
    """Issue 46.1: the model's failure was no prediction, so a re-run at T=1 retried it until the model succeeded
    (selecting samples) and the harness's rate left it out. It is the model's empty patch, kept."""
    instances, _ = flask
    calls = []

    def prose(conversations, temperature):
        calls.append(len(conversations))
        return ["I would look at the code."] * len(conversations)

    args = ([instances[0]], shared_data / "repos", tmp_path / "out", prose, len,
            pipeline.AgentlessSettings(num_samples=2))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "predictions.jsonl").write_text('{"instance_id": "cut by a kil')  # a killed run's last line
    (made,) = pipeline.run_instances(*args, progress=False)
    assert made["model_patch"] == "" and "error" not in made
    assert made["empty_patch_reason"] == "localization found no file of the repository"
    cut, kept = (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    assert json.loads(kept) == made  # on a line of its own, not glued to the cut one
    assert pipeline.run_instances(*args, progress=False) == [] and calls == [2]  # kept: not asked again
