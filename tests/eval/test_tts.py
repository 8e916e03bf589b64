"""`python -m swerl_jax.eval.tts` end to end on the suite's tiny setting (`experiments/agent_tts.py:tiny`: the demo's
7M model, untrained, on held-out synthetic tasks): trajectories graded by the harness, the execution-based verifier,
the execution-free verifier trained with the SFT trainer, the selectors and the report. The rates are ~0 for an
untrained policy; what is checked is that every stage ran and the report agrees with the trajectories."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from swerl_jax.agent.env import TERMINATIONS
from tests.conftest import JAX_CACHE, REPO_ROOT, TTS_TINY_FLAGS, requires_smollm2


@requires_smollm2
def test_tts_command_runs_every_stage_and_reports(agent_tts_tiny_run):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
           "PYTHONPATH": str(REPO_ROOT), "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE)}
    out_dir, stdout = agent_tts_tiny_run  # the command below, run in the background (tests/conftest.py)
    stderr = (out_dir.parent / "stderr.txt").read_text()
    cmd = [sys.executable, "-m", "swerl_jax.eval.tts", "--config=experiments/agent_tts.py:tiny", f"--out={out_dir}",
           *TTS_TINY_FLAGS]
    report = json.loads((out_dir / "report.json").read_text())
    trajectories = [json.loads(line) for line in (out_dir / "trajectories.jsonl").read_text().splitlines()]
    assert report["instances"] == 1 and report["K"] == 2 and len(trajectories) == 2
    assert all(t["termination"] in (*TERMINATIONS, "env_error") for t in trajectories)
    assert report["pass@1"] == sum(t["resolved"] for t in trajectories) / 2
    (inst,) = report["per_instance"]
    assert inst["resolved"] == [t["resolved"] for t in trajectories]
    assert len(inst["verifier_scores"]) == 2 and all(0.0 < s < 1.0 for s in inst["verifier_scores"])
    for name in ("execution", "verifier", "hybrid"):  # a choice is one of the K trajectories, or none
        assert inst["chosen"][name] in (None, 0, 1)
        assert report["best@K"][name] == (inst["chosen"][name] is not None
                                          and inst["resolved"][inst["chosen"][name]])
    # the verifier: the policy's trajectory of one other task plus that task's scripted gold episode, 2 SFT steps
    assert report["verifier_training"] == {"rows": 2, "resolved": 1, "tasks": 1}
    assert len((out_dir / "verifier" / "metrics.jsonl").read_text().splitlines()) == 2
    assert (out_dir / "report.md").read_text() in stdout
    assert "tts: 4/4 report: " in stderr and (out_dir / "done" / "policy-0.jsonl").exists()  # resumable
    # issue 57 item 6: the verifier's gold training episodes printed "1/1 episodes resolved" under the execution
    # verifier's heading, as if the policy had resolved them
    execution = stderr.split("tts: 2/4 execution verifier")[1].split("tts: 3/4")[0]
    assert "episodes resolved" not in execution
    assert "verifier training, scripted gold episodes: instances 1-1 of 1: 1/1 episodes resolved" in stderr
    # another config into the same --out is refused in one line before anything runs (its batches are reused)
    again = subprocess.run([*cmd[:-1], "--config.verifier.num_steps=3"], cwd=REPO_ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 2 and "holds results of another config (verifier.num_steps: 2 -> 3)" in again.stderr
    assert "Traceback" not in again.stderr


def test_relative_weights_of_another_model_are_one_line_from_outside_the_clone(tmp_path, monkeypatch):
    """Issue 46 items 9 and 10: `--config.weights=RUN/policy` typed relative (and `--config=experiments/...` from
    outside the clone) resolve from the current directory, and weights of another model than the policy config's
    are one line naming both before the --out folder is made (they reached Orbax, which refuses relative paths)."""
    import pytest

    from swerl_jax.eval import tts
    from swerl_jax.model.convert import CheckpointError
    from tests.eval.fake_runs import small_run

    small_run(tmp_path / "T", model="tiny")  # agent_tts.py:tiny's policy is tiny_cpu's demo-7m
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as err:
        tts.main(["--config=experiments/agent_tts.py:tiny", "--out=o", "--config.weights=T/policy"])
    assert str(err.value).startswith(f"weights {tmp_path / 'T' / 'policy'}: the weights are model.name='tiny' "
                                     f"({tmp_path / 'T' / 'config.json'}), but policy=experiments/tiny_cpu.py is "
                                     "model.name='demo-7m'"), err.value
    assert not (tmp_path / "o").exists()


def test_out_under_a_file_is_one_line_naming_out_before_anything_starts(tmp_path, capsys):
    """Day-three check: `--out RUN/metrics.jsonl` loaded the policy, then said "[Errno 20] Not a directory:
    '.../metrics.jsonl/tasks/eval/repos'" (not naming --out), as train and repair_score no longer do."""
    import pytest

    from swerl_jax.eval import tts

    (tmp_path / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(FileExistsError, match=rf"^--out {tmp_path / 'metrics.jsonl'}/o: {tmp_path / 'metrics.jsonl'}"
                                              " is a file, not a folder$"):
        tts.main(["--config=experiments/agent_tts.py:tiny", f"--out={tmp_path / 'metrics.jsonl'}/o"])
    assert "evaluating" not in capsys.readouterr().out
    assert (tmp_path / "metrics.jsonl").read_text() == "{}\n"


def test_a_batch_line_names_whose_episodes_it_counts():
    from swerl_jax.eval.scaling import Trajectory
    from swerl_jax.eval.tts import batch_line

    batch = [[Trajectory("task-0", k, "patch", True, "finish", 3, "...") for k in range(2)]]
    assert batch_line("", 0, batch, 1) == "    instances 1-1 of 1: 2/2 episodes resolved"
    assert batch_line("verifier training, scripted gold episodes", 0, batch, 1) == (
        "    verifier training, scripted gold episodes: instances 1-1 of 1: 2/2 episodes resolved")


def test_a_policy_trained_on_a_generated_set_is_evaluated_without_its_training_files(tmp_path, monkeypatch):
    """Issue 58 item 7: `--config.policy=experiments/agent_tasks_cpu.py` (trained on a generated set's
    train.jsonl) refused to start where its training files were not, FileNotFoundError naming agent.instances: the
    instances evaluated are `instances`, and the policy's own task files are never read here."""
    import pytest

    from swerl_jax.eval import tts

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        tts.main(["--config=experiments/agent_tts.py:tiny", "--out=o", "--config.policy=experiments/agent_tasks_cpu.py",
                  f"--config.instances={tmp_path / 'heldout.jsonl'}", f"--config.repos={tmp_path}"])
    assert "agent." not in str(err.value) and str(tmp_path / "heldout.jsonl") in str(err.value), err.value
    assert not (tmp_path / "o").exists()
