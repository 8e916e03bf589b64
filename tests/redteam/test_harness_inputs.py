"""Adversarial harness input (issue 30, defects 8 and 9): prediction ids that are paths, and concurrent gradings of
one instance; and the checkout that holds no later history (issue 45 defect 2, the fix's commit)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import threading

import pytest

from swerl_jax.eval import harness, predictions
from swerl_jax.sandbox.bwrap import SandboxLimits
from swerl_jax.tasks import environments
from swerl_jax.tasks.executors import LocalExecutor, checkout


class RecordingExecutor:
    """Grades every instance 'resolved' and records the log dirs it was given."""

    def __init__(self):
        self.log_dirs, self.lock = [], threading.Lock()

    def evaluate(self, instance, patch, log_dir):
        with self.lock:
            self.log_dirs.append(log_dir)
        return {"status": "resolved"}


def instance(iid: str) -> dict:
    return {"instance_id": iid, "repo": "o/r", "base_commit": "c", "test_patch": "", "version": "1"}


@pytest.mark.parametrize("hostile", ["../../victim", "/ABSOLUTE/victim", "..", "a/../../victim", ".hidden", ""])
def test_a_prediction_id_is_never_a_path(tmp_path, monkeypatch, capsys, hostile):
    """Defect 8: ids with '..' or absolute ones emptied folders outside --out and then crashed."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    hostile = hostile.replace("/ABSOLUTE/victim", str(victim))
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance("good__one-1")) + "\n")
    preds = [{"instance_id": hostile, "model_name_or_path": "m", "model_patch": "x"},
             {"instance_id": "good__one-1", "model_name_or_path": "m", "model_patch": "x"}]
    (tmp_path / "preds.jsonl").write_text("\n".join(json.dumps(p) for p in preds) + "\n")
    out = tmp_path / "out" / "run"
    executor = RecordingExecutor()
    monkeypatch.setattr(harness, "make_executor", lambda args: executor)
    report = harness.main(["--instances", str(tmp_path / "instances.jsonl"), "--predictions",
                           str(tmp_path / "preds.jsonl"), "--repos", str(tmp_path), "--out", str(out),
                           "--no-progress"])
    assert (victim / "precious.txt").read_text() == "keep me"
    assert report["resolved_ids"] == ["good__one-1"]  # the rest of the file is graded
    unknown = [e for e in report["prediction_errors"] if e["status"] == "unknown_instance"]
    assert [e["instance_id"] for e in unknown] == [hostile]
    assert executor.log_dirs == [out / "logs" / "good__one-1"]
    stderr = capsys.readouterr().err
    assert stderr.count("not in the instances file") == 1
    for path in out.rglob("*"):
        assert path.resolve().is_relative_to(out.resolve())


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/b", ".git"])
def test_an_unsafe_id_in_the_instances_file_is_one_error_naming_it(tmp_path, bad):
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance(bad)) + "\n")
    with pytest.raises(ValueError, match=r"instances\.jsonl: instance #1: instance_id .* cannot name a file"):
        predictions.index_instances(tmp_path / "instances.jsonl")


def test_concurrent_gradings_of_one_instance_never_share_a_work_dir(tmp_path, monkeypatch):
    """Defect 9: GRPO samples of one task graded at once (env_workers > 1) read and deleted each other's files."""
    executor = LocalExecutor(tmp_path / "repos", tmp_path / "out", envs=None, limits=SandboxLimits())
    both_in = threading.Barrier(2, timeout=60)
    seen = []

    def fake_evaluate(inst, patch, log_dir, work):
        (work / "mine.txt").write_text(patch)
        seen.append(work)
        both_in.wait()  # both gradings are inside their work dirs at once
        return {"status": "resolved" if (work / "mine.txt").read_text() == patch else "clobbered"}

    monkeypatch.setattr(executor, "_evaluate", fake_evaluate)
    results = {}
    threads = [threading.Thread(target=lambda p=p: results.__setitem__(p, executor.evaluate(
        instance("o__r-1"), p, tmp_path))) for p in ("patch one", "patch two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == {"patch one": {"status": "resolved"}, "patch two": {"status": "resolved"}}
    assert len(set(seen)) == 2 and not any(p.exists() for p in seen)  # each its own, each removed after


def test_a_checkout_holds_nothing_after_the_base_commit(tmp_path, shared_data):
    """Defect 2: a checkout (an episode's, a grading's, a script's) must not carry the history after its base commit
    (the fix is there); the base's own ancestors stay, as in SWE-bench's images."""
    bundle = shared_data / "repos" / "pallets__flask.bundle"
    base = "d8c37f43724cd9fb0870f77877b7c4c7e38a19e0"
    assert "not reachable from" in checkout(bundle, tmp_path / "from_bundle", base)  # refused, not leaked
    clone = environments.resolve_clone(shared_data / "repos", "pallets/flask", tmp_path / "clones")
    assert checkout(clone, tmp_path / "repo", base) == ""
    commits = subprocess.run(["git", "-C", str(tmp_path / "repo"), "rev-list", "--all"], capture_output=True,
                             text=True, check=True).stdout.split()
    assert set(commits) == set(subprocess.run(["git", "--git-dir", str(clone), "rev-list", base], capture_output=True,
                                              text=True, check=True).stdout.split())  # the base and its ancestors
    assert not (tmp_path / "repo" / ".git" / "objects" / "info" / "alternates").exists()
    later = subprocess.run(["git", "-C", str(tmp_path / "repo"), "cat-file", "-e", "7c5261407dae61679c268b44c63d739"
                            "09c3fe652"], capture_output=True)  # flask-4045's fix
    assert later.returncode != 0
    assert pathlib.Path(tmp_path / "repo" / "src" / "flask" / "blueprints.py").is_file()


def test_a_patch_that_is_not_text_is_one_malformed_line_and_the_rest_is_graded(tmp_path, monkeypatch):
    """Red-team pass: JSON allows "\\udc80"; such a model_patch aborted the whole run."""
    (tmp_path / "instances.jsonl").write_text("".join(json.dumps(instance(i)) + "\n" for i in ("a__b-1", "a__b-2")))
    (tmp_path / "preds.jsonl").write_text(
        json.dumps({"instance_id": "a__b-1", "model_name_or_path": "m", "model_patch": "diff \udc80"}) + "\n"
        + json.dumps({"instance_id": "a__b-2", "model_name_or_path": "m", "model_patch": "x"}) + "\n")
    monkeypatch.setattr(harness, "make_executor", lambda args: RecordingExecutor())
    report = harness.main(["--instances", str(tmp_path / "instances.jsonl"), "--predictions",
                           str(tmp_path / "preds.jsonl"), "--repos", str(tmp_path), "--out", str(tmp_path / "out"),
                           "--no-progress"])
    assert report["resolved_ids"] == ["a__b-2"] and report["malformed_predictions"] == 1
    assert "lone surrogate" in report["prediction_errors"][0]["error"]
