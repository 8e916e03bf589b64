"""The trusted pytest plugin on this interpreter's pytest (a newer pluggy than the SWE-bench environments': its
hook callers have slots), outside any sandbox: outcomes by SWE-bench's rules, an xfail only with a marker, a hook
registered from the code under test is `tampered`, and a record needs the run's token."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from swerl_jax.sandbox.pytest_verdict import MARK, PluginRun

TESTS = '''import pytest
import helper


def test_pass():
    assert helper.value() == 1


def test_fail():
    assert helper.value() == 2


@pytest.mark.xfail(reason="known")
def test_marked_xfail():
    assert False


def test_imperative_xfail():
    helper.give_up()


@pytest.mark.skip(reason="no")
def test_skipped():
    pass
'''
HELPER = '''import pytest


def value():
    return 1


def give_up():
    pytest.xfail("the code under test declares its own failure expected")
'''
HOOK = '''

def _register():
    import gc

    class AllPass:
        def pytest_runtest_logreport(self, report):
            report.outcome = "passed"

    for obj in gc.get_objects():
        if type(obj).__name__ == "Config" and type(obj).__module__ == "_pytest.config":
            obj.pluginmanager.register(AllPass(), "all-pass")
            return


_register()
'''


def run(tmp_path: pathlib.Path, helper: str) -> tuple[PluginRun, str]:
    """pytest over the tests above with the plugin loaded as a grading loads it (from its own folder, named first)."""
    repo, inputs = tmp_path / "repo", tmp_path / "inputs"
    repo.mkdir()
    inputs.mkdir()
    (repo / "test_things.py").write_text(TESTS)
    (repo / "helper.py").write_text(helper)
    site = pathlib.Path(pytest.__file__).resolve().parents[1]
    plugin = PluginRun.new([site])
    for name, text in plugin.inputs().items():
        (inputs / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.update(plugin.env({"PYTHONPATH": str(repo)}))
    env["PYTHONPATH"] = env["PYTHONPATH"].replace("/run/swerl", str(inputs))
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_things.py"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    return plugin, done.stdout + done.stderr


def test_outcomes_follow_swebench_and_an_xfail_needs_its_marker(tmp_path):
    plugin, output = run(tmp_path, HELPER)
    ids = [f"test_things.py::{name}" for name in ("test_pass", "test_fail", "test_marked_xfail",
                                                  "test_imperative_xfail", "test_skipped")]
    (record,) = plugin.records(output)
    assert record["tampered"] == [], record
    assert record["outcomes"] == dict(zip(ids, ["PASSED", "FAILED", "XFAIL", "FAILED", "SKIPPED"])), output
    verdict = plugin.verdict(output, [ids[0], ids[2]])
    assert verdict.status == "resolved" and verdict.exitstatus == 1
    assert plugin.verdict(output, ids[:2]).status == "unresolved"
    # the log grading would count the imperative xfail as a pass (SWE-bench's parser reads XFAIL)
    assert f"XFAIL {ids[3]}" in output


def test_a_hook_registered_by_the_code_under_test_is_tampering(tmp_path):
    plugin, output = run(tmp_path, HELPER + HOOK)
    verdict = plugin.verdict(output, ["test_things.py::test_pass"])
    assert verdict.status == "tampered" and any("pytest_runtest_logreport" in t for t in verdict.tampered), output


def test_a_record_counts_only_with_the_runs_token(tmp_path):
    plugin, output = run(tmp_path, HELPER)
    (record,) = plugin.records(output)
    other = PluginRun.new([])
    assert other.records(output) == [] and other.verdict(output, ["x"]).status == "missing"
    forged = output + "\n" + MARK + json.dumps({**record, "outcomes": {"test_things.py::test_fail": "PASSED"}})
    assert plugin.verdict(forged, ["test_things.py::test_pass"]).status == "tampered"  # two records, one run
