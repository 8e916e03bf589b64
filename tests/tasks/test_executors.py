"""The test-phase script both executors run, the official image names, and docker's clear refusal."""

import json
import shutil

import pytest

from swerl_jax.tasks import executors, specs
from swerl_jax.tasks import index_cutoff as cutoffs


def test_eval_script_follows_the_official_order(shared_data):
    lite = {r["instance_id"]: r for r in json.loads((shared_data / "swebench_lite.json").read_text())}
    instance = lite["pallets__flask-4045"]
    script = executors.eval_script(instance, specs.env_spec("pallets/flask", "2.0"), "/w/repo", "/w/test.patch")
    lines = script.splitlines()
    assert lines[0] == "cd /w/repo"
    # (hooks and fsmonitor off: a patch applied by `patch -p1` can write the checkout's .git)
    reset = lines.index(f"git -c core.hooksPath=/dev/null -c core.fsmonitor=false checkout -q "
                        f"{instance['base_commit']} -- tests/test_basic.py tests/test_blueprints.py")
    apply = next(i for i, x in enumerate(lines) if x.startswith("git apply -v /w/test.patch"))
    start = lines.index(f"echo '{specs.constants().START_TEST_OUTPUT}'")
    assert reset < apply < start
    assert lines[start + 1] == "pytest -rA tests/test_basic.py tests/test_blueprints.py"
    assert lines[start + 2] == f"echo '{specs.constants().END_TEST_OUTPUT}'"


def test_official_image_name():
    assert executors.docker_image("pallets__flask-4045") == "swebench/sweb.eval.x86_64.pallets_1776_flask-4045:latest"


def test_docker_executor_refuses_clearly_without_docker(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker CLI
    with pytest.raises(RuntimeError, match="--executor docker needs the docker CLI"):
        executors.DockerExecutor(tmp_path)
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    fake.chmod(0o755)
    assert shutil.which("docker") == str(fake)
    with pytest.raises(RuntimeError, match="daemon is not reachable: Cannot connect"):
        executors.DockerExecutor(tmp_path)


def test_a_repository_not_in_repos_is_out_of_reach_with_the_fix(tmp_path):
    """Issue 49.3: django/scikit-learn/matplotlib are not on this machine: say so, and what would fix it."""
    from swerl_jax.tasks import environments

    local = executors.LocalExecutor(tmp_path / "repos", tmp_path / "out", environments.EnvironmentCache(tmp_path / "e"))
    (tmp_path / "log").mkdir()
    instance = {"instance_id": "django__django-11099", "repo": "django/django", "version": "3.0", "base_commit": "c"}
    result = local.prepare(instance, "", tmp_path / "log", tmp_path / "work")
    assert result["status"] == "out_of_reach"
    assert result["reason"] == f"django/django is not in --repos {tmp_path / 'repos'}"
    assert "git clone --mirror https://github.com/django/django" in result["fix"]
    assert str(tmp_path / "repos" / "django__django.git") in result["fix"]


def test_the_index_cutoff_is_part_of_a_result_key_and_off_keeps_todays(tmp_path):
    """Issue 49.1: a result graded against today's index is not reused for the dated one, and the reverse; off
    keeps today's fingerprint, so stored results of today stay valid."""
    from swerl_jax.tasks import environments

    def local(mode):
        return executors.LocalExecutor(tmp_path, tmp_path / "out", environments.EnvironmentCache(tmp_path),
                                       index_cutoff=mode)

    instance = {"instance_id": "pallets__flask-4045", "repo": "pallets/flask", "version": "2.0",
                "created_at": "2021-05-13T21:32:41Z"}
    off, on = local("off").fingerprint(instance), local("created_at").fingerprint(instance)
    assert "index_cutoff" not in off and "tooling_cutoff" not in off and "tooling" not in off
    assert on == {**off, "index_cutoff": "2021-05-13T21:32:41Z", "tooling_cutoff": "2024-06-27T00:00:00Z",
                  "tooling": sorted(cutoffs.TOOLING)}
    with pytest.raises(ValueError, match="index cut-off 'of'"):
        local("of")
