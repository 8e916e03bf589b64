"""`python -m swerl_jax.eval run` names what it evaluates and never evaluates something else silently (issue 31,
items 2 and 3): a weights path without a policy, or a policy config without weights, is an error before anything
loads; the engine's predictions carry the policy version."""

import jax
import pytest

from swerl_jax.eval import run as eval_run
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.sampler import weights


def config(**overrides):
    c = eval_run.load_experiment_config("experiments/eval_agentless_mini.py:cpu")
    for key, value in overrides.items():
        setattr(c, key, value)
    return c


def test_a_mistyped_weights_path_is_an_error_with_a_did_you_mean(tmp_path):
    weights.publish(tmp_path / "run" / "policy", init_params(get_model_config("demo-7m"), jax.random.PRNGKey(0)), 3)
    with pytest.raises(FileNotFoundError, match=r"polcy: no such directory \(did you mean .*/run/policy\?\)"):
        eval_run.evaluated_model(config(weights=str(tmp_path / "run" / "polcy")))
    with pytest.raises(FileNotFoundError, match=r"no published policy in it .*did you mean .*/run/policy\?"):
        eval_run.evaluated_model(config(weights=str(tmp_path / "run")))  # the run dir instead of its policy/
    with pytest.raises(FileNotFoundError, match=r"policy version 7 is not there \(kept: \[3\]\)"):
        eval_run.evaluated_model(config(weights=str(tmp_path / "run" / "policy"), version=7))
    # the policy config of the published weights' model (demo-7m; the cpu config's own is smollm2-135m)
    named = eval_run.evaluated_model(config(policy="experiments/tiny_cpu.py", weights=str(tmp_path / "run" / "policy")))
    assert named["policy_version"] == 3 and named["model_name"] == f"{tmp_path / 'run' / 'policy'}@v3"
    assert "policy version 3 (GRPO step 3)" in named["what"]
    # LATEST naming a deleted version (new-user check: an AttributeError deep in Orbax's metadata)
    import shutil

    shutil.rmtree(weights.version_path(tmp_path / "run" / "policy", 3))
    with pytest.raises(FileNotFoundError, match=r"the newest policy, version 3 \(LATEST\) is not there \(kept: \[\]\)"):
        eval_run.evaluated_model(config(weights=str(tmp_path / "run" / "policy")))


def test_a_policy_without_weights_is_never_evaluated_as_a_random_init():
    with pytest.raises(ValueError, match="its model has no weights .* never evaluated silently"):
        eval_run.evaluated_model(config(policy="experiments/tiny_cpu.py"))


def test_the_oracle_is_labelled_as_the_gold_patches():
    assert eval_run.evaluated_model(config(backend="oracle"))["model_name"] == "oracle-gold-patches"


def test_an_instance_that_failed_is_no_prediction_and_is_retried(shared_data, tmp_path):
    """Held-out check: a missing clone made an empty prediction that a re-run kept (graded: unresolved, exit 0)."""
    import json

    (tmp_path / "repos_late").mkdir()
    argv = ["--config", "experiments/eval_agentless_mini.py:cpu", "--out", str(tmp_path / "out"), "--no-progress",
            "--config.backend=oracle", "--config.grade=false", "--config.agentless.regression=false",
            "--config.agentless.reproduction_tests=0", "--config.instance_ids=pallets__flask-4045",
            f"--config.instances={shared_data / 'swebench_lite.json'}", f"--config.repos={tmp_path / 'repos_late'}"]
    first = eval_run.main(argv)
    assert first["failed"] == ["pallets__flask-4045"] and eval_run.exit_code(first) == 1
    assert not (tmp_path / "out" / "predictions.jsonl").exists()
    (tmp_path / "repos_late" / "pallets__flask.bundle").symlink_to(shared_data / "repos" / "pallets__flask.bundle")
    second = eval_run.main(argv)  # the same command once the clone is there: the instance is tried again
    assert second["failed"] == [] and eval_run.exit_code(second) == 0
    (pred,) = [json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    assert pred["model_patch"] and pred["model_name_or_path"] == "oracle-gold-patches"
    with pytest.raises(ValueError, match=r"instance_ids: \['pallets__flask-4045'\] named more than once"):
        eval_run.main([*argv[:-4], "--config.instance_ids=pallets__flask-4045,pallets__flask-4045", *argv[-2:]])


def test_a_run_folder_given_as_hf_dir_is_named_as_such(tmp_path):
    """Held-out check: a run's folder as hf_dir gave transformers' five-line tokenizer message."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text('{"seed": 0, "model": {}}')
    with pytest.raises(FileNotFoundError, match="not a Hugging Face model folder .* python -m swerl_jax.eval export"):
        eval_run.evaluated_model(config(hf_dir=str(tmp_path / "run")))


def test_default_data_paths_and_relative_paths_resolve_from_outside_the_repository(shared_data, tmp_path,
                                                                                   monkeypatch):
    """Issue 46 item 9: from outside the clone, the config's `../shared/data/...` was looked for under the current
    directory; it resolves as data.* paths do, and --out and the config file from the current directory."""
    import json

    monkeypatch.chdir(tmp_path)
    result = eval_run.main(["--config", "experiments/eval_agentless_mini.py:cpu", "--out", "out", "--no-progress",
                            "--config.backend=oracle", "--config.grade=false", "--config.agentless.regression=false",
                            "--config.agentless.reproduction_tests=0", "--config.instance_ids=pallets__flask-4045"])
    assert result["failed"] == [] and (tmp_path / "out" / "predictions.jsonl").is_file()
    saved = json.loads((tmp_path / "out" / "eval_config.json").read_text())
    assert saved["instances"] == str(shared_data / "swebench_lite.json") and saved["repos"] == str(
        shared_data / "repos")


def test_a_bad_cutoff_or_repos_is_named_before_out_is_claimed(tmp_path):
    """New-user check: index_cutoff=image wrote eval_config.json first, so the corrected command was refused as
    another config's folder; a missing repos folder made every instance fail with no prediction."""
    base = ["--config", "experiments/eval_agentless_mini.py:cpu", "--out", str(tmp_path / "out"), "--no-progress",
            "--config.backend=oracle"]
    with pytest.raises(ValueError, match=r"index_cutoff='image' is not one of .*did you mean 'images'"):
        eval_run.main([*base, "--config.index_cutoff=image"])
    with pytest.raises(FileNotFoundError, match=r"repos=.*nosuch: no such folder"):
        eval_run.main([*base, f"--config.repos={tmp_path / 'nosuch'}"])
    assert not (tmp_path / "out").exists()


def test_weights_of_another_model_are_one_line_naming_both_models(tmp_path):
    """Issue 46 item 10: weights of another model than the policy config's gave Orbax internals when loading."""
    from swerl_jax.model.convert import CheckpointError
    from tests.eval.fake_runs import small_run

    small_run(tmp_path / "T", model="tiny")
    with pytest.raises(CheckpointError) as err:
        eval_run.evaluated_model(config(policy="experiments/tiny_cpu.py", weights=str(tmp_path / "T" / "policy")))
    (line,) = str(err.value).splitlines()
    assert line.startswith(f"weights {tmp_path / 'T' / 'policy'}: the weights are model.name='tiny' "
                           f"({tmp_path / 'T' / 'config.json'}), but policy=experiments/tiny_cpu.py is "
                           "model.name='demo-7m'"), line


def mixed_run(shared_data, tmp_path, monkeypatch, ids="pallets__flask-4045,pallets__flask-4992,nowhere__repo-1",
              repos=None):
    """eval run over three instances: the oracle's gold patch (flask-4045), a model that localizes nothing
    (flask-4992) and a repository that is not there (no prediction); grading scripted."""
    import json

    from swerl_jax.eval import harness
    from swerl_jax.eval.agentless import scripted

    lite = {r["instance_id"]: r for r in json.loads((shared_data / "swebench_lite.json").read_text())}
    gone = {**lite["pallets__flask-4045"], "instance_id": "nowhere__repo-1", "repo": "nowhere/repo"}
    (tmp_path / "instances.json").write_text(json.dumps([lite["pallets__flask-4045"], lite["pallets__flask-4992"],
                                                         gone]))
    oracle = scripted.OracleChat([lite["pallets__flask-4045"]])

    def chat(conversations, temperature):
        return [oracle([c], temperature)[0] if lite["pallets__flask-4045"]["problem_statement"] in c[-1]["content"]
                else "no idea" for c in conversations]

    monkeypatch.setattr(eval_run, "build_chat", lambda c, instances, evaluated: (chat, len))
    graded = {"pallets__flask-4045": {"status": "resolved"}, "pallets__flask-4992": {"status": "unresolved"}}
    monkeypatch.setattr(harness, "make_executor", lambda args: type("E", (), {
        "evaluate": lambda self, inst, patch, log_dir: dict(graded[inst["instance_id"]])})())
    argv = ["--config", "experiments/eval_agentless_mini.py:cpu", "--out", str(tmp_path / "out"), "--no-progress",
            "--config.backend=oracle", "--config.agentless.regression=false",
            "--config.agentless.reproduction_tests=0", f"--config.instance_ids={ids}", "--config.precheck=static",
            f"--config.instances={tmp_path / 'instances.json'}", f"--config.repos={repos or shared_data / 'repos'}"]
    return argv


def test_the_rate_is_over_every_instance_asked_and_the_models_failure_is_kept(shared_data, tmp_path, monkeypatch,
                                                                              capsys):
    """Issue 46.1: the model's failure was no prediction (retried on re-run: sampling until it succeeds) and the
    harness's rate left it out (2 instances, 1 prediction: "resolved 1/1")."""
    import json

    argv = mixed_run(shared_data, tmp_path, monkeypatch)
    result = eval_run.main(argv)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "resolved 1/3 (unresolved 0, empty patch 1, error 0, no prediction 1)"
    assert any(line.startswith("agentless: 3 instances asked: 1 with a patch, 1 empty patch (the model's: "
                               "localization found no file of the repository 1), 1 no prediction") for line in out)
    assert not any("kept from an earlier run" in line for line in out)
    assert result["failed"] == ["nowhere__repo-1"] and eval_run.exit_code(result) == 1
    preds = {p["instance_id"]: p for p in map(json.loads, (tmp_path / "out" / "predictions.jsonl").read_text()
                                             .splitlines())}
    assert preds["pallets__flask-4992"]["model_patch"] == "" and "nowhere__repo-1" not in preds
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["outcome_counts"] == {"resolved": 1, "unresolved": 0, "empty_patch": 1, "error": 0,
                                         "no_prediction": 1}
    assert summary["resolved_rate"] == 1 / 3 and summary["instances_asked"] == 3
    assert summary["evaluated"]["model_name"] == "oracle-gold-patches" and summary["config"].endswith(":cpu")
    assert summary["eval_config"]["backend"] == "oracle" and "nowhere" in summary["no_prediction"]["nowhere__repo-1"]
    assert summary["empty_patch"] == {"pallets__flask-4992": "localization found no file of the repository"}
    with open(tmp_path / "out" / "predictions.jsonl", "a") as f:
        f.write('{"instance_id": "nowhere__re')  # a line cut by a killed run: skipped (it was a traceback)
    again = eval_run.main(argv)  # the model's failure is kept; the infrastructure's is tried again
    assert [m["instance_id"] for m in again["predictions"]] == ["nowhere__repo-1"]
    out = capsys.readouterr().out.strip().splitlines()
    assert any("0 made now, 2 kept from an earlier run" in line for line in out)


def test_every_instance_failed_says_so_in_one_line(shared_data, tmp_path, monkeypatch, capsys):
    """Issue 46.14: with grade=true and no prediction at all, the run ended with "--predictions ...: no such file"
    (a flag the user never passed) after "0 made now, the rest kept from an earlier run" (there was none)."""
    import json

    (tmp_path / "empty").mkdir()
    argv = mixed_run(shared_data, tmp_path, monkeypatch, "pallets__flask-4045,pallets__flask-4992",
                        tmp_path / "empty")
    result = eval_run.main(argv)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "--predictions" not in text and "kept from an earlier run" not in text
    assert ("agentless: every instance failed before a prediction: 2 no prediction (re-run to retry them)"
            in captured.out)
    assert captured.out.strip().splitlines()[-1] == ("resolved 0/2 (unresolved 0, empty patch 0, error 0, "
                                                     "no prediction 2)")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["outcome_counts"]["no_prediction"] == 2 and summary["report"] is None
    assert eval_run.exit_code(result) == 1


def test_the_predictions_label_names_what_was_evaluated(tmp_path, monkeypatch):
    """Issue 46.3: `hf_dir=EXPORT` of a Qwen3 export labelled its predictions `swerl_jax-smollm2-135m`, the
    config's default name."""
    (tmp_path / "qwen3-export").mkdir()
    (tmp_path / "qwen3-export" / "config.json").write_text('{"model_type": "qwen3"}')
    policy = str(eval_run.pathlib.Path("experiments/smollm2_cpu.py").resolve())
    exported, mine = config(hf_dir="qwen3-export", policy=policy), config(hf_dir="qwen3-export", policy=policy,
                                                                          model_name="mine")
    served = config(backend="openai", openai_model="Qwen/Qwen3-8B")
    monkeypatch.chdir(tmp_path)  # a relative path is labelled by the folder it names
    assert eval_run.evaluated_model(exported)["model_name"] == str(tmp_path / "qwen3-export")
    assert eval_run.evaluated_model(mine)["model_name"] == "mine"
    assert eval_run.evaluated_model(served)["model_name"] == "Qwen/Qwen3-8B"


def test_help_shows_the_whole_description(capsys):
    """Issue 46.15's kind: the description was the docstring's first line, the usage cut at its colon."""
    with pytest.raises(SystemExit):
        eval_run.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Agentless Mini over SWE-bench instances with a policy" in text and "resolved N/M" in text


def test_a_mistyped_instance_id_gets_a_did_you_mean():
    from swerl_jax.eval.predictions import chosen_instances

    known = {"pallets__flask-4045": {"instance_id": "pallets__flask-4045"}, "o__r-1": {"instance_id": "o__r-1"}}
    assert chosen_instances(known, "", "F") == list(known.values())
    assert chosen_instances(known, " o__r-1 ", "F") == [known["o__r-1"]]
    with pytest.raises(KeyError, match=r"\['pallets__flask-4054'\] are not in F \(did you mean "
                                       r"pallets__flask-4045\?\)"):
        chosen_instances(known, "pallets__flask-4054", "F")
    with pytest.raises(ValueError, match="named more than once"):
        chosen_instances(known, "o__r-1,o__r-1", "F")


def test_an_instance_out_of_reach_is_skipped_before_generating_and_named(shared_data, tmp_path, monkeypatch, capsys):
    """Issue 57 item 7: Agentless generated for 1m26s before the harness found both instances out of reach. An
    instance whose environment this machine cannot make (here: flask-4992's, as if it needed conda) is named with
    its reason and fix before anything is generated, never sent to the model, and counted out of reach; the bar
    shows each instance's stage."""
    import json

    from swerl_jax.tasks import environments

    plan = environments.EnvironmentCache.plan

    def lacking(self, instance, git_dir, cutoff=None):
        if instance["instance_id"] == "pallets__flask-4992":
            raise environments.OutOfReach("pallets/flask 2.3 needs a conda environment (environment.yml)",
                                          "--executor docker")
        return plan(self, instance, git_dir, cutoff)

    monkeypatch.setattr(environments.EnvironmentCache, "plan", lacking)
    argv = mixed_run(shared_data, tmp_path, monkeypatch, "pallets__flask-4045,pallets__flask-4992")
    asked = []
    real = eval_run.build_chat  # mixed_run's scripted chat, recording whom it was built for
    monkeypatch.setattr(eval_run, "build_chat", lambda c, instances, evaluated: (
        asked.extend(i["instance_id"] for i in instances), real(c, instances, evaluated))[1])
    result = eval_run.main([a for a in argv if a != "--no-progress"])
    captured = capsys.readouterr()
    out = captured.out.strip().splitlines()
    assert out[0] == ("agentless: skipped before generating, out of reach (1): pallets/flask 2.3 needs a conda "
                      "environment (environment.yml); fix: --executor docker: pallets__flask-4992")
    assert asked == ["pallets__flask-4045"] and not (tmp_path / "out" / "trajectories" / "pallets__flask-4992.json"
                                                     ).exists()
    assert out[-1] == ("resolved 1/1 (unresolved 0, empty patch 0, error 0, no prediction 0; out of reach 1, "
                       "not counted)")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["outcome_counts"]["out_of_reach"] == 1 and summary["resolved_rate"] == 1.0
    assert "conda" in summary["out_of_reach_before_generating"]["pallets__flask-4992"]
    assert "agentless: instances" in captured.err and "pallets__flask-4045: localizing" in captured.err
    assert eval_run.exit_code(result) == 0
