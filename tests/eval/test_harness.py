"""The harness around an executor: bad input becomes per-instance statuses, the run goes on, resumes, reports."""

import json
import threading

import pytest

from swerl_jax.eval import harness


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
    assert last == "resolved 1/7"
    statuses = {i: r["status"] for i, r in report["instances"].items()}
    assert statuses == {"a": "resolved", "b": "patch_failed", "c": "error"}  # zzz is not an instance: not graded
    assert "boom" in report["instances"]["c"]["error"]
    assert (files / "out" / "logs" / "c" / "harness_error.log").read_text().count("RuntimeError: boom") == 1
    errors = {e.get("line", e.get("instance_id")): e["status"] for e in report["prediction_errors"]}
    assert errors == {4: "malformed_prediction", 5: "malformed_prediction", 6: "duplicate_prediction",
                      "zzz": "unknown_instance"}
    assert report["resolved_ids"] == ["a"] and report["error_ids"] == ["b", "c"]
    assert report["error_instances"] == 6 and report["empty_patch_ids"] == []
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
    assert last == "resolved 2/7" and report["resolved_ids"] == ["a", "c"]
    # A changed prediction for a finished instance is graded again.
    text = (files / "preds.jsonl").read_text().replace('"patch b"', '"patch b2"')
    (files / "preds.jsonl").write_text(text)
    third = ScriptedExecutor({"b": {"status": "resolved"}})
    report, last = run_cli(files, third, monkeypatch, capsys)
    assert third.calls == ["b"] and last == "resolved 3/7"


def test_instances_file_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(instance("a")) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        harness.load_instances(path)
    path.write_text(json.dumps([{"instance_id": "x", "repo": "o/r"}]))
    with pytest.raises(ValueError, match=r"\(x\) lacks \['base_commit', 'test_patch', 'version'\]"):
        harness.load_instances(path)
