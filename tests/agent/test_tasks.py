"""Which tasks an agent run trains and evaluates on: a generated set's train split, and its held-out split for
evaluation (agent.eval_instances), both graded by the harness over agent.repos."""

from __future__ import annotations

import json

import pytest

from experiments import agent_tasks_cpu
from swerl_jax.agent.tasks import AgentTasks
from swerl_jax.resolve import validate_config
from swerl_jax.tasks.executors import LocalExecutor


def _generated(tmp_path, name: str, n: int) -> str:
    """A JSONL split shaped as `python -m swerl_jax.tasks generate` writes it (inferred spec, mutation, source)."""
    path = tmp_path / f"{name}.jsonl"
    rows = [{"instance_id": f"acme__calc.0123abcd.off_by_one.{name}{i}", "repo": "acme/calc",
             "base_commit": "0" * 40, "patch": "", "test_patch": "", "problem_statement": "a test fails",
             "hints_text": "", "created_at": "2024-01-01T00:00:00Z", "version": "inferred",
             "environment_setup_commit": "0" * 40, "FAIL_TO_PASS": '["tests/test_calc.py::test_add"]',
             "PASS_TO_PASS": "[]", "source": "mutation", "mutation": {"kind": "off_by_one", "file": "calc.py"},
             "spec": {"python": "3.11", "install": "python -m pip install -e .", "test_cmd": "pytest -rA",
                      "pip_packages": ["pytest"], "inferred": {}}} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERL_JAX_HOME", str(tmp_path / "home"))  # the executor's environment cache, never ~'s
    c = agent_tasks_cpu.get_config("short")
    c.agent.instances = _generated(tmp_path, "train", 3)
    c.agent.eval_instances = _generated(tmp_path, "heldout", 3)
    (tmp_path / "repos").mkdir()
    c.agent.repos = str(tmp_path / "repos")
    return c


def test_heldout_tasks_are_the_held_out_split_graded_by_the_harness(config, tmp_path):
    validate_config(config, check_files=True)
    train = AgentTasks.from_config(config, tmp_path / "run")
    heldout = AgentTasks.from_config(config, tmp_path / "run", heldout=True)
    assert [i["instance_id"][-6:] for i in train.instances] == ["train0", "train1", "train2"]
    # the first agent.eval_tasks (2 in :short) of the held-out split, never synthetic tasks of another seed
    assert [i["instance_id"][-8:] for i in heldout.instances] == ["heldout0", "heldout1"]
    assert isinstance(heldout.executor, LocalExecutor) and heldout.repos_dir == tmp_path / "repos"
    assert heldout.work_root != train.work_root  # evaluation episodes never share the training episodes' folder


def test_held_out_instances_need_their_repos_and_a_missing_split_is_named(config, tmp_path):
    config.agent.instances = ""  # synthetic training tasks, generated held-out ones: the repos are still read
    validate_config(config, check_files=True)
    config.agent.repos = ""
    with pytest.raises(ValueError, match="agent.eval_instances="):
        validate_config(config, check_files=False)
    config.agent.repos = str(tmp_path / "repos")
    config.agent.eval_instances = str(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match="agent.eval_instances="):
        validate_config(config, check_files=True)
