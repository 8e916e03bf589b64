"""Calibration's exclusion rules and selection."""

import pytest

from swerl_jax.eval import calibrate


def result(status, tmp_path, log="", **extra):
    (tmp_path / "test.log").write_text(log)
    return {"status": status, "log_dir": str(tmp_path), **extra}


def test_exclusion_reasons(tmp_path):
    ok, bad = result("resolved", tmp_path), result("unresolved", tmp_path)
    assert calibrate.exclusion_reason(ok, bad) is None
    assert calibrate.exclusion_reason(ok, ok) == "the empty patch resolves it"
    counts = {"FAIL_TO_PASS": {"passed": 0, "total": 2}, "PASS_TO_PASS": {"passed": 5, "total": 5}}
    assert calibrate.exclusion_reason(result("unresolved", tmp_path, **counts), bad) == (
        "gold unresolved (FAIL_TO_PASS 0/2, PASS_TO_PASS 5/5)")
    offline = result("unresolved", tmp_path, log="requests.exceptions.ConnectionError: Max retries exceeded with url")
    assert "need the network" in calibrate.exclusion_reason(offline, bad)
    assert calibrate.exclusion_reason(result("env_failed", tmp_path, error="no Python 3.6"), bad) == (
        "gold env_failed (no Python 3.6)")


def test_select_and_table():
    instances = {i: {"repo": r} for i, r in [("b2", "o/b"), ("a1", "o/a"), ("b1", "o/b"), ("a2", "o/a")]}
    assert calibrate.select(instances, None, 1) == ["a1", "b1"]
    assert calibrate.select(instances, ["o/b"], None) == ["b1", "b2"]
    # new-user check: a mistyped --repo calibrated nothing and exited 0; --per-repo 0 calibrated everything
    with pytest.raises(KeyError, match=r"--repo o/bb: no instance of it .*did you mean o/b\?"):
        calibrate.select(instances, ["o/bb"], None)
    with pytest.raises(ValueError, match=r"--per-repo 0: must be >= 1"):
        calibrate.select(instances, None, 0)
    rows = [{"instance_id": "a1", "repo": "o/a", "gold_status": "resolved", "empty_status": "unresolved",
             "excluded": None},
            {"instance_id": "a2", "repo": "o/a", "gold_status": "unresolved", "empty_status": "unresolved",
             "excluded": "gold unresolved"},
            {"instance_id": "a3", "repo": "o/a", "gold_status": "unresolved", "empty_status": "unresolved",
             "excluded": "gold unresolved: its tests need the network (none in the sandbox)"}]
    text = calibrate.table(rows)
    assert "| o/a | 3 | 1 | 0 | 2 | 1/2 (50%) |" in text  # the rate leaves out only the network-bound a3
    assert "| a2 | unresolved | unresolved | gold unresolved |" in text


def test_out_of_reach_is_excluded_and_counted_apart(tmp_path):
    """Issue 49.3: out of reach is neither a gold failure nor in the rate's denominator."""
    far = result("out_of_reach", tmp_path, reason="no Python 3.6 interpreter on this machine",
                 fix="pyenv install 3.6")
    assert calibrate.exclusion_reason(far, far) == (
        "out of reach: no Python 3.6 interpreter on this machine; fix: pyenv install 3.6")
    rows = [{"instance_id": "a1", "repo": "o/a", "gold_status": "resolved", "empty_status": "unresolved",
             "excluded": None},
            {"instance_id": "a2", "repo": "o/a", "gold_status": "out_of_reach", "empty_status": "out_of_reach",
             "excluded": calibrate.exclusion_reason(far, far)}]
    assert "| o/a | 2 | 1 | 0 | 1 | 1/1 (100%) | 1 |" in calibrate.table(rows)


def test_paths_typed_relative_reach_the_harness_absolute(tmp_path, monkeypatch, capsys):
    """Held-out check of issue 46, item 4: calibrate's path flags are resolved once, against the current
    directory, so the harness reports it runs name absolute files."""
    import json

    from swerl_jax.eval import harness, predictions

    (tmp_path / "instances.jsonl").write_text(json.dumps({"instance_id": "a", "repo": "o/r", "patch": "p"}) + "\n")
    calls = []

    def fake_main(argv):
        calls.append(argv)
        return {"instances": {"a": {"status": "resolved", "log_dir": str(tmp_path)}}}

    monkeypatch.setattr(predictions, "index_instances", lambda path: {"a": {"repo": "o/r", "patch": "p"}})
    monkeypatch.setattr(harness, "main", fake_main)
    monkeypatch.chdir(tmp_path)
    calibrate.main(["--instances", "instances.jsonl", "--repos", ".", "--out", "cal"])
    flags = dict(zip(calls[0][::2], calls[0][1::2]))
    assert flags["--instances"] == str(tmp_path / "instances.jsonl") and flags["--repos"] == str(tmp_path)
    assert flags["--out"] == str(tmp_path / "cal" / "gold")
    assert flags["--instance_ids"] == "a"  # the harness's M counts the calibrated instances, not the whole file
    assert "(table: " + str(tmp_path / "cal" / "calibration.md") in capsys.readouterr().out
