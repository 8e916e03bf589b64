"""The command-line contract (issue 31.8, 31.9): bad input is one line naming it, Ctrl-C one line saying how to
resume, each with its exit code; the harness's Ctrl-C writes the report of what finished."""

import json
import threading

import pytest

from swerl_jax.cli import run_cli
from swerl_jax.eval import harness


def test_bad_input_is_one_line_and_exit_2(capsys):
    def main(argv):
        raise KeyError("unknown config key backnd; did you mean backend?")

    with pytest.raises(SystemExit) as done:
        run_cli("prog", main, argv=[])
    assert done.value.code == 2
    assert capsys.readouterr().err == "prog: unknown config key backnd; did you mean backend?\n"


def test_ctrl_c_is_one_line_saying_how_to_resume(capsys):
    def main(argv):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as done:
        run_cli("prog", main, resume="run the same command again", argv=[])
    assert done.value.code == 130
    assert capsys.readouterr().err.strip() == "prog: interrupted; to resume, run the same command again"


def test_the_exit_code_follows_the_result():
    with pytest.raises(SystemExit) as done:
        run_cli("prog", lambda argv: {"n": 3}, argv=[], exit_code=lambda r: r["n"])
    assert done.value.code == 3


def test_the_harness_writes_the_report_of_what_finished_on_ctrl_c(tmp_path, monkeypatch, capsys):
    """Issue 31.7: Ctrl-C during grading leaves report.json with the finished instances and the pending ones."""
    ids = ["a", "b", "c"]
    (tmp_path / "instances.jsonl").write_text("".join(json.dumps(
        {"instance_id": i, "repo": "o/r", "base_commit": "c", "test_patch": "", "version": "1"}) + "\n" for i in ids))
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(
        {"instance_id": i, "model_name_or_path": "m", "model_patch": "p"}) + "\n" for i in ids))
    first_done = threading.Event()

    class Interrupted:
        def evaluate(self, instance, patch, log_dir):
            if instance["instance_id"] == "a":
                first_done.set()
                return {"status": "resolved"}
            first_done.wait(60)
            raise KeyboardInterrupt  # what the main thread gets from a Ctrl-C while the others grade

    monkeypatch.setattr(harness, "make_executor", lambda args: Interrupted())
    with pytest.raises(KeyboardInterrupt):
        harness.main(["--instances", str(tmp_path / "instances.jsonl"), "--predictions",
                      str(tmp_path / "preds.jsonl"), "--repos", str(tmp_path), "--out", str(tmp_path / "out"),
                      "--no-progress", "--workers", "1"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["interrupted"] and report["resolved_ids"] == ["a"] and report["pending_ids"] == ["b", "c"]
    assert report["outcome_counts"]["pending"] == 2 and report["no_prediction_ids"] == []  # had predictions
    assert "interrupted: 1 graded, 2 not" in capsys.readouterr().err


HELP_MODULES = ["swerl_jax.eval.export", "swerl_jax.eval.tts", "swerl_jax.sweep", "swerl_jax.testbed.tokenizer",
                "swerl_jax.model.check_logits", "swerl_jax.eval.harness", "swerl_jax.eval.calibrate",
                "swerl_jax.eval.run", "swerl_jax.eval.repair_score", "swerl_jax.curate.__main__",
                "swerl_jax.data.__main__"]


@pytest.mark.parametrize("module", HELP_MODULES)
def test_help_shows_the_whole_docstring_as_written(module, capsys):
    """Held-out check of issue 46, item 7: `eval.export --help` cut its description at the docstring's first line
    and `eval.tts --help` showed only the usage line; every entry point's --help is its whole docstring, laid out
    as written."""
    import importlib

    mod = importlib.import_module(module)
    with pytest.raises(SystemExit) as done:
        mod.main(["--help"])
    assert done.value.code in (0, None)
    shown = {line.rstrip() for line in capsys.readouterr().out.splitlines()}
    missing = [line for line in mod.__doc__.strip().splitlines() if line.strip() and line.rstrip() not in shown]
    assert not missing, f"{module} --help leaves out {missing[:2]}"


def test_no_entry_point_cuts_its_description():
    """The rule behind the test above, for entry points still to come: no `description=__doc__.split(...)`."""
    import pathlib

    package = pathlib.Path(__file__).resolve().parents[1] / "swerl_jax"
    cut = [str(p.relative_to(package)) for p in package.rglob("*.py") if "description=__doc__.split" in p.read_text()]
    assert cut == []


def test_a_repos_folder_that_is_not_there_is_named(tmp_path):
    """New-user check: a mistyped --repos read as every instance "out of reach", with a fix that cloned into it."""
    (tmp_path / "instances.jsonl").write_text(json.dumps({"instance_id": "a", "repo": "o/r"}) + "\n")
    (tmp_path / "preds.jsonl").write_text(json.dumps(
        {"instance_id": "a", "model_name_or_path": "m", "model_patch": "p"}) + "\n")
    with pytest.raises(FileNotFoundError, match=r"--repos .*/nosuch: no such folder"):
        harness.main(["--instances", str(tmp_path / "instances.jsonl"), "--predictions", str(tmp_path / "preds.jsonl"),
                      "--repos", str(tmp_path / "nosuch"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
