"""The harness around an executor: bad input becomes per-instance statuses, the run goes on, resumes, reports."""

import json
import threading

import pytest

from swerl_jax.eval import harness, predictions


class ScriptedExecutor:
    """Returns a fixed outcome per instance (the executors themselves are tested in test_executors)."""

    def __init__(self, outcomes):
        self.outcomes, self.calls, self.lock = outcomes, [], threading.Lock()

    def evaluate(self, instance, patch, log_dir):
        with self.lock:
            self.calls.append(instance["instance_id"])
        outcome = self.outcomes[instance["instance_id"]]
        if isinstance(outcome, Exception):
            raise outcome
        (log_dir / "test.log").write_text("log")
        return dict(outcome)


def instance(iid):
    return {"instance_id": iid, "repo": "o/r", "base_commit": "c", "test_patch": "", "version": "1",
            "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}


@pytest.fixture
def files(tmp_path):
    (tmp_path / "instances.jsonl").write_text("\n".join(json.dumps(instance(i)) for i in ("a", "b", "c", "d")))
    preds = [{"instance_id": i, "model_name_or_path": "m", "model_patch": f"patch {i}"} for i in ("a", "b", "c")]
    lines = [json.dumps(p) for p in preds]
    lines += ["{not json", json.dumps({"instance_id": "d"}), json.dumps(preds[0] | {"model_patch": "other"}),
              json.dumps({"instance_id": "zzz", "model_name_or_path": "m", "model_patch": ""})]
    (tmp_path / "preds.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def run_cli(files, executor, monkeypatch, capsys, workers=2):
    monkeypatch.setattr(harness, "make_executor", lambda args: executor)
    report = harness.main(["--instances", str(files / "instances.jsonl"), "--predictions", str(files / "preds.jsonl"),
                           "--repos", str(files), "--out", str(files / "out"), "--workers", str(workers),
                           "--no-progress"])
    return report, capsys.readouterr().out.strip().splitlines()[-1]


def test_bad_input_is_per_instance_and_the_run_goes_on(files, monkeypatch, capsys):
    executor = ScriptedExecutor({"a": {"status": "resolved"}, "b": {"status": "patch_failed", "error": "no"},
                                 "c": RuntimeError("boom")})
    report, last = run_cli(files, executor, monkeypatch, capsys)
    assert last == "resolved 1/4 (unresolved 0, empty patch 0, error 2, no prediction 1)"  # d
    statuses = {i: r["status"] for i, r in report["instances"].items()}
    assert statuses == {"a": "resolved", "b": "patch_failed", "c": "error"}  # zzz is not an instance: not graded
    assert "boom" in report["instances"]["c"]["error"]
    assert (files / "out" / "logs" / "c" / "harness_error.log").read_text().count("RuntimeError: boom") == 1
    errors = {e.get("line", e.get("instance_id")): e["status"] for e in report["prediction_errors"]}
    assert errors == {4: "malformed_prediction", 5: "malformed_prediction", 6: "duplicate_prediction",
                      "zzz": "unknown_instance"}
    assert report["resolved_ids"] == ["a"] and report["error_ids"] == ["b", "c"]
    assert report["error_instances"] == 2 and report["empty_patch_ids"] == [] and report["unknown_ids"] == ["zzz"]
    assert report["malformed_predictions"] == 3
    assert json.loads((files / "out" / "report.json").read_text()) == report
    for entry in report["instances"].values():
        assert entry["log_dir"].startswith(str(files / "out"))
    assert sorted(p.name for p in (files / "out").iterdir()) == ["logs", "report.json", "results"]


def test_resume_skips_finished_instances(files, monkeypatch, capsys):
    first = ScriptedExecutor({"a": {"status": "resolved"}, "b": {"status": "unresolved"}, "c": RuntimeError("x")})
    run_cli(files, first, monkeypatch, capsys)
    second = ScriptedExecutor({"a": {"status": "unresolved"}, "b": {"status": "resolved"}, "c": {"status": "resolved"}})
    report, last = run_cli(files, second, monkeypatch, capsys, workers=1)
    assert second.calls == ["c"]  # a and b were finished; c's harness crash is retried
    assert last == "resolved 2/4 (unresolved 1, empty patch 0, error 0, no prediction 1)"
    assert report["resolved_ids"] == ["a", "c"]
    # A changed prediction for a finished instance is graded again.
    text = (files / "preds.jsonl").read_text().replace('"patch b"', '"patch b2"')
    (files / "preds.jsonl").write_text(text)
    third = ScriptedExecutor({"b": {"status": "resolved"}})
    report, last = run_cli(files, third, monkeypatch, capsys)
    assert third.calls == ["b"] and last.startswith("resolved 3/4 (unresolved 0,")


def test_instances_file_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(instance("a")) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        predictions.index_instances(path)
    path.write_text(json.dumps([{"instance_id": "x", "repo": "o/r"}]))
    with pytest.raises(ValueError, match=r"\(x\) lacks \['base_commit', 'test_patch', 'version'\]"):
        predictions.index_instances(path)


def test_a_renamed_prediction_field_gets_a_did_you_mean(tmp_path):
    """New-user check: a prediction with `patch` for `model_patch` was told only what was missing."""
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps({"instance_id": "a", "model": "m", "patch": "p"}) + "\n"
                    + json.dumps({"instance_id": "a", "model_name_or_path": "m", "model_pach": "p"}) + "\n")
    _, errors = predictions.load_predictions(path)
    assert [e["error"].split("model_patch')); ")[1] for e in errors] == [
        "did you mean 'model_name_or_path' (not 'model'), 'model_patch' (not 'patch')?",
        "did you mean 'model_patch' (not 'model_pach')?"]


def test_pr_records_as_instances_are_named_as_such(tmp_path):
    """New-user check: PR records given as `instances` were told only that `version` was missing."""
    path = tmp_path / "records.jsonl"
    record = {k: v for k, v in instance("a").items() if k != "version"}
    path.write_text(json.dumps({**record, "code_context": {}, "oracle_patch": "p"}) + "\n")
    with pytest.raises(ValueError, match=r"\(a\) lacks \['version'\]: this file holds PR records \(oracle_patch, "
                                         r"code_context\), not SWE-bench instances; give a SWE-bench instances file"):
        predictions.index_instances(path)


class KeyedExecutor:
    """Answers from a script per call; its fingerprint is its timeout (as LocalExecutor's holds its limits)."""

    def __init__(self, answers, timeout=10.0):
        self.answers, self.timeout, self.calls = list(answers), timeout, 0

    def fingerprint(self, instance):
        return {"timeout_s": self.timeout}

    def evaluate(self, instance, patch, log_dir):
        self.calls += 1
        return dict(self.answers.pop(0))


def one_prediction(tmp_path, patch="p", as_list=False, **instance_fields):
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance("a") | instance_fields) + "\n")
    pred = {"instance_id": "a", "model_name_or_path": "m", "model_patch": patch}
    (tmp_path / "preds.json").write_text(json.dumps([pred]) if as_list else json.dumps(pred) + "\n")


def grade(tmp_path, executor, monkeypatch, *extra):
    monkeypatch.setattr(harness, "make_executor", lambda args: executor)
    return harness.main(["--instances", str(tmp_path / "instances.jsonl"), "--predictions",
                         str(tmp_path / "preds.json"), "--repos", str(tmp_path), "--out", str(tmp_path / "out"),
                         "--no-progress", *extra])


@pytest.mark.parametrize("failure", ["no_repo", "env_failed", "setup_failed"])
def test_an_infrastructure_failure_is_never_reused(tmp_path, monkeypatch, failure):
    """Issue 31.1: a mistyped --repos made `no_repo` stick; after the fix, gold still reported resolved 0/1."""
    one_prediction(tmp_path)
    assert grade(tmp_path, KeyedExecutor([{"status": failure}]), monkeypatch)["resolved_instances"] == 0
    fixed = KeyedExecutor([{"status": "resolved"}])
    assert grade(tmp_path, fixed, monkeypatch)["resolved_instances"] == 1 and fixed.calls == 1
    again = KeyedExecutor([])
    assert grade(tmp_path, again, monkeypatch)["resolved_instances"] == 1 and again.calls == 0  # a result: reused


def test_a_result_is_keyed_by_the_limits_and_the_instance(tmp_path, monkeypatch):
    """Issue 31.1: a short --timeout stayed `timeout` on re-run with a longer one; a changed instance too."""
    one_prediction(tmp_path)
    assert grade(tmp_path, KeyedExecutor([{"status": "timeout"}], timeout=1), monkeypatch)["resolved_instances"] == 0
    longer = KeyedExecutor([{"status": "resolved"}], timeout=1800)
    assert grade(tmp_path, longer, monkeypatch)["resolved_instances"] == 1 and longer.calls == 1
    one_prediction(tmp_path, test_patch="another test patch")
    changed = KeyedExecutor([{"status": "unresolved"}], timeout=1800)
    assert grade(tmp_path, changed, monkeypatch)["resolved_instances"] == 0 and changed.calls == 1


def test_the_report_counts_every_status_and_the_exit_code_says_what_failed(files, monkeypatch, capsys):
    """Issue 31.6: per-status counts on stdout, `error_instances` agrees with `error_ids`, exit code 1 for
    malformed input or nothing graded, a JSON list accepted, --instance_ids filters (with a "did you mean")."""
    executor = ScriptedExecutor({"a": {"status": "resolved"}, "b": {"status": "patch_failed", "error": "no"},
                                 "c": {"status": "unresolved"}})
    report, last = run_cli(files, executor, monkeypatch, capsys)
    assert report["error_instances"] == len(report["error_ids"]) == 1
    assert harness.summary(report) == ("graded 3: resolved 1, unresolved 1, empty patch 0, error 1 (patch_failed 1); "
                                       "not graded: unknown id 1, malformed line 3")
    assert harness.exit_code(report) == 1
    (files / "x").mkdir()
    one_prediction(files / "x", as_list=True)  # predictions as a JSON list, SWE-bench's other form
    listed = grade(files / "x", KeyedExecutor([{"status": "resolved"}]), monkeypatch)
    assert listed["resolved_ids"] == ["a"] and harness.exit_code(listed) == 0
    nothing = grade(files / "x", KeyedExecutor([{"status": "env_failed"}], timeout=3), monkeypatch)
    assert nothing["completed_instances"] == 0 and harness.exit_code(nothing) == 1
    with pytest.raises(ValueError, match=r"--instance_ids: 'aa' is not in the instances file \(did you mean 'a'\?\)"):
        grade(files / "x", KeyedExecutor([]), monkeypatch, "--instance_ids", "aa")
    monkeypatch.setattr(harness, "make_executor", lambda args: ScriptedExecutor({"b": {"status": "resolved"}}))
    only_b = harness.main(["--instances", str(files / "instances.jsonl"), "--predictions", str(files / "preds.jsonl"),
                           "--repos", str(files), "--out", str(files / "out_b"), "--no-progress",
                           "--instance_ids", "b"])
    assert sorted(only_b["instances"]) == ["b"] and only_b["unknown_ids"] == []


def test_nothing_graded_is_exit_1_even_for_an_empty_predictions_file(tmp_path, monkeypatch):
    """Held-out check: an empty predictions file (or an --instance_ids without a prediction) printed resolved 0/0
    with exit 0."""
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance("a")) + "\n")
    for text in ("", "[]", "  \n"):
        (tmp_path / "preds.json").write_text(text)
        assert harness.exit_code(grade(tmp_path, KeyedExecutor([]), monkeypatch)) == 1


def test_a_pretty_printed_object_keyed_by_id_and_a_byte_order_mark_are_read(tmp_path, monkeypatch):
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance("a")) + "\n")
    by_id = {"a": {"model_name_or_path": "m", "model_patch": "p"}}
    (tmp_path / "preds.json").write_text("\ufeff" + json.dumps(by_id, indent=2), encoding="utf-8")
    report = grade(tmp_path, KeyedExecutor([{"status": "resolved"}]), monkeypatch)
    assert report["resolved_ids"] == ["a"] and report["malformed_predictions"] == 0


def test_a_crashed_test_runner_is_an_error_not_unresolved():
    """Held-out check: --memory-gb 0.05 made pytest crash (INTERNALERROR> MemoryError) and gold read unresolved."""
    from swerl_jax.tasks import grading, specs

    consts = specs.constants()
    log = (f"{consts.START_TEST_OUTPUT}\nINTERNALERROR> MemoryError\n{consts.END_TEST_OUTPUT}\n")
    inst = {**instance("a"), "repo": "pallets/flask", "FAIL_TO_PASS": '["tests/test_a.py::test_x"]'}
    report = grading.grade(inst, log)
    assert report["tests_ran"] and report["runner_crashed"] and not report["resolved"]
    # pytest's own tests print INTERNALERROR lines in captured output; the session then closes with its summary
    # (pytest-dev__pytest-11148's empty patch read as a crash)
    finished = (f"{consts.START_TEST_OUTPUT}\n----- Captured stdout call -----\nINTERNALERROR> ZeroDivisionError\n"
                f"FAILED tests/test_a.py::test_x\n===== 1 failed, 129 passed, 1 skipped in 3.69s =====\n"
                f"{consts.END_TEST_OUTPUT}\n")
    report = grading.grade(inst, finished)
    assert not report["runner_crashed"] and not report["resolved"]
    older = finished.replace("in 3.69s", "in 1.45 seconds")  # pytest < 5.1 (pytest-dev__pytest-5692's own run)
    assert not grading.grade(inst, older)["runner_crashed"]


def test_the_rate_counts_every_instance_asked_about_with_a_count_per_reason(tmp_path, monkeypatch, capsys):
    """Issue 46.1: 2 instances and 1 prediction printed "resolved 1/1": the rate left out the instance with no
    prediction. SWE-bench's convention: no prediction, an empty patch and an error are unresolved, over all."""
    (tmp_path / "instances.jsonl").write_text("\n".join(json.dumps(instance(i)) for i in "abcde"))
    preds = {"a": "patch a", "b": "", "c": "patch c", "d": "patch d"}  # e: no prediction
    (tmp_path / "preds.json").write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "run7@v3",
                                                             "model_patch": p}) + "\n" for i, p in preds.items()))
    executor = ScriptedExecutor({"a": {"status": "resolved"}, "b": {"status": "unresolved"},
                                 "c": {"status": "patch_failed", "error": "no"}, "d": {"status": "unresolved"}})
    report = grade(tmp_path, executor, monkeypatch)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "resolved 1/5 (unresolved 1, empty patch 1, error 1, no prediction 1)"
    assert report["outcome_counts"] == {"resolved": 1, "unresolved": 1, "empty_patch": 1, "error": 1,
                                        "no_prediction": 1}
    assert report["no_prediction_ids"] == ["e"] and report["resolved_rate"] == 0.2
    # b, an empty patch graded unresolved, was counted twice ("unresolved 2 ...; empty patch 1" of 4 graded)
    assert harness.summary(report) == ("graded 4: resolved 1, unresolved 1, empty patch 1, error 1 (patch_failed 1); "
                                       "not graded: unknown id 0, malformed line 0")
    assert report["unresolved_ids"] == ["d"] and report["empty_patch_ids"] == ["b"] and report["error_ids"] == ["c"]
    assert report["model_names"] == ["run7@v3"] and report["predictions_file"] == str(tmp_path / "preds.json")
    only = grade(tmp_path, ScriptedExecutor({}), monkeypatch, "--instance_ids", "a", "e")
    assert capsys.readouterr().out.strip().splitlines()[-1] == ("resolved 1/2 (unresolved 0, empty patch 0, error 0, "
                                                               "no prediction 1)")
    assert only["total_instances"] == 2 and only["resolved_rate"] == 0.5


def test_out_of_reach_is_counted_apart_named_in_one_line_with_its_fix(tmp_path, monkeypatch, capsys):
    """Issue 49.3: an instance whose repository is not in --repos (or whose environment needs what the machine
    lacks) read as an error, counted with the unresolved: the rate fell for a reason no patch could change."""
    (tmp_path / "instances.jsonl").write_text("\n".join(json.dumps(instance(i)) for i in "abc"))
    (tmp_path / "preds.json").write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "m",
                                                             "model_patch": "p"}) + "\n" for i in "abc"))
    far = {"status": "out_of_reach", "reason": "o/r is not in --repos R", "fix": "clone it into R/o__r.git"}
    executor = ScriptedExecutor({"a": {"status": "resolved"}, "b": {"status": "unresolved"}, "c": far})
    report = grade(tmp_path, executor, monkeypatch)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == ("resolved 1/2 (unresolved 1, empty patch 0, error 0, no prediction 0; "
                       "out of reach 1, not counted)")
    assert "out of reach (1): o/r is not in --repos R; fix: clone it into R/o__r.git: c" in out
    assert report["resolved_rate"] == 0.5 and report["error_ids"] == [] and report["out_of_reach_ids"] == ["c"]
    assert report["out_of_reach"] == {"c": {"reason": far["reason"], "fix": far["fix"]}}
    # out of reach was counted as graded ("graded 1: ..., out of reach 1" with nothing graded): it is not
    assert harness.summary(report) == ("graded 2: resolved 1, unresolved 1, empty patch 0, error 0; not graded: out "
                                       "of reach 1, unknown id 0, malformed line 0")
    again = ScriptedExecutor({"c": {"status": "resolved"}})  # fetched since: graded anew, not reused
    assert grade(tmp_path, again, monkeypatch)["resolved_instances"] == 2 and again.calls == ["c"]


def test_paths_typed_relative_are_absolute_from_the_current_directory(tmp_path, monkeypatch, capsys):
    """Held-out check of issue 46, item 4: report.json kept `--predictions preds.json` as typed, which names another
    file from any other directory; every path flag is resolved once, against the current directory."""
    one_prediction(tmp_path)
    seen = {}

    def executor(args):
        seen.update(repos=args.repos, out=args.out)
        return ScriptedExecutor({"a": {"status": "resolved"}})

    monkeypatch.setattr(harness, "make_executor", executor)
    monkeypatch.chdir(tmp_path)
    report = harness.main(["--instances", "instances.jsonl", "--predictions", "preds.json", "--repos", ".",
                           "--out", "out", "--no-progress"])
    assert report["predictions_file"] == str(tmp_path / "preds.json")
    assert report["instances_file"] == str(tmp_path / "instances.jsonl")
    assert seen == {"repos": tmp_path, "out": tmp_path / "out"}
    assert capsys.readouterr().out.splitlines()[0] == f"report: {tmp_path / 'out' / 'report.json'}"


def test_help_shows_the_whole_description(capsys):
    """Held-out check of issue 46, item 7: `--help` showed only the docstring's first line."""
    with pytest.raises(SystemExit):
        harness.main(["--help"])
    out = capsys.readouterr().out
    assert "results/<id>.json (one per graded instance" in out and "listed in test_infra_ids." in out


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_env_cache_gb_must_be_a_size_above_zero(value, capsys):
    """0 would remove every env after each build (minutes of pip each): refused, naming the flag."""
    from swerl_jax.eval.harness import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--instances", "i", "--predictions", "p", "--repos", "r", "--out", "o",
                                   "--env-cache-gb", value])
    assert "--env-cache-gb" in capsys.readouterr().err


def test_empty_patches_out_of_reach_are_counted_once(tmp_path, monkeypatch, capsys):
    """Issue 57 item 6: 2 instances, both empty patches whose repository is out of reach, printed "graded 0: ...;
    empty patch 2; not graded: out of reach 2", and report.json had empty_patch_instances 2 against
    outcome_counts.empty_patch 0."""
    (tmp_path / "instances.jsonl").write_text("\n".join(json.dumps(instance(i)) for i in "ab"))
    (tmp_path / "preds.json").write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "m",
                                                             "model_patch": ""}) + "\n" for i in "ab"))
    far = {"status": "out_of_reach", "reason": "o/r is not in --repos R", "fix": "clone it into R/o__r.git"}
    report = grade(tmp_path, ScriptedExecutor({"a": far, "b": far}), monkeypatch)
    assert report["empty_patch_instances"] == report["outcome_counts"]["empty_patch"] == 0
    assert report["empty_patch_ids"] == [] and report["out_of_reach_ids"] == ["a", "b"]
    assert harness.summary(report) == ("graded 0: resolved 0, unresolved 0, empty patch 0, error 0; not graded: out "
                                       "of reach 2, unknown id 0, malformed line 0")


@pytest.mark.parametrize("value", ["logs", "", "PLUGIN"])
def test_a_bad_verdict_is_refused_naming_the_flag_and_the_choices(value, capsys):
    """--verdict (issue 56) takes log or plugin; anything else is one argparse line naming the flag and both."""
    from swerl_jax.eval.harness import build_parser
    from swerl_jax.tasks.executors import LocalExecutor

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--instances", "i", "--predictions", "p", "--repos", "r", "--out", "o",
                                   "--verdict", value])
    err = capsys.readouterr().err
    assert "--verdict" in err and "'log'" in err and "'plugin'" in err
    with pytest.raises(ValueError, match="verdict .* must be one of"):
        LocalExecutor(None, None, None, verdict=value)
