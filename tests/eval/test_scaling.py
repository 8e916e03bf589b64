"""Test-time scaling: pass@k against enumeration, the selectors on known labels, the execution-based verifier on a real
synthetic task (a reproduction script run in the sandbox on each trajectory's patch), the execution-free verifier's
prompt budget, SFT and scores. The whole `eval.tts` command: tests/eval/test_tts.py."""

from __future__ import annotations

import difflib
import itertools
import json

import numpy as np
import pytest

from experiments import tiny_cpu
from swerl_jax.agent import verifier
from swerl_jax.agent.synthetic import SyntheticTasks
from swerl_jax.eval import scaling
from swerl_jax.eval.agentless import rerank
from swerl_jax.eval.agentless.pipeline import AgentlessSettings
from swerl_jax.tokenizer import tokenizer_for
from tests.conftest import requires_smollm2

pytestmark = requires_smollm2


def _traj(patch: str, resolved: bool, sample: int = 0) -> scaling.Trajectory:
    return scaling.Trajectory("i", sample, patch, resolved, "finish", 3, "transcript")


def test_pass_at_k_is_the_chance_that_k_random_samples_hold_a_resolved_one():
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                expected = np.mean([any(i < c for i in s) for s in subsets])
                assert scaling.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError):
        scaling.pass_at_k(2, 1, 3)


def test_selectors_and_report_on_known_labels():
    settings = AgentlessSettings(reproduction_tests=1, regression=True)
    a = [_traj("wrong", False, 0), _traj("gold", True, 1), _traj("", False, 2), _traj("gold", True, 3)]
    b = [_traj("", False, 0), _traj("", False, 1), _traj("", False, 2), _traj("", False, 3)]
    samples = [rerank.Sample("wrong", "wrong", 0, frozenset()), rerank.Sample("gold", "gold", 0, frozenset({"0"})),
               rerank.Sample("", ""), rerank.Sample("gold", "gold", 0, frozenset({"0"}))]
    scores = [0.9, 0.2, 0.99, 0.6]
    assert scaling.select_execution(samples, settings, ran=True) == 1  # the consensus on the reproduction test
    assert scaling.select_execution(samples, settings, ran=False) == 1  # vote alone: "gold" twice
    assert scaling.select_verifier(scores, a) == 0  # 2 scores higher but has no patch
    assert scaling.select_hybrid(samples, scores, settings, ran=True) == 3  # verifier's best of {1, 3}
    assert scaling.select_verifier([0.5] * 4, a) == 0  # ties: the earliest
    assert scaling.select_verifier(scores, b) is None and scaling.select_hybrid([rerank.Sample("", "")] * 4, scores,
                                                                               settings, True) is None
    report = scaling.scaling_report([a, b], {"execution": [1, None], "verifier": [0, None], "hybrid": [3, None]})
    assert report["pass@1"] == pytest.approx(0.25)  # (2/4 + 0) / 2
    assert report["pass@K"] == pytest.approx(0.5)
    assert report["pass@k"]["2"] == pytest.approx((1 - 1 / 6) / 2)  # 1 - C(2,2)/C(4,2) on a
    assert report["best@K"] == {"execution": 0.5, "verifier": 0.0, "hybrid": 0.5}
    assert "| 2 | 4 | 25.0 | 50.0 | 50.0 | 0.0 | 50.0 |" in scaling.report_table(report)


def _reproduction_script(instance: dict) -> str:
    """The hidden issue test as Agentless's reproduction script (prints the outcome markers)."""
    lines = instance["test_patch"].split("+++ ", 1)[1].splitlines()[1:]
    test = "\n".join(line[1:] for line in lines if line.startswith("+"))
    test = test.split('if __name__ == "__main__":')[0]
    return ("import os, sys\nsys.path.insert(0, os.getcwd())\n" + test +
            "result = unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(TestIssue))\n"
            "print('Issue resolved' if result.wasSuccessful() else 'Issue reproduced')\n")


def test_the_execution_verifier_runs_the_reproduction_script_on_each_patch(tmp_path):
    tasks = SyntheticTasks(tmp_path / "tasks", n=1, seed=0)
    inst = tasks.instances[0]
    path, before = inst["gold_edit"]["path"], inst["gold_edit"]["before"]
    wrong = "".join(difflib.unified_diff(before.splitlines(True), ["# touched\n"] + before.splitlines(True),
                                         f"a/{path}", f"b/{path}"))
    trajs = [_traj(wrong, False, 0), _traj(inst["patch"], True, 1), _traj("", False, 2), _traj(inst["patch"], True, 3)]
    script = _reproduction_script(inst)
    asked = []

    def chat(conversations, temperature):
        asked.extend(c[-1]["content"] for c in conversations)
        return [f"Here it is.\n```python\n{script}\n```"] * len(conversations)

    settings = AgentlessSettings(reproduction_tests=1, regression=False, thinking=False)
    samples, info = scaling.execution_samples(inst, trajs, chat, tasks.executor(tmp_path / "grade"), settings,
                                              tmp_path / "logs")
    assert inst["problem_statement"] in asked[0]
    assert info["tests"]["outcomes_on_original"] == ["reproduced"] and info["tests"]["kept"] == [0]
    assert [sorted(s.reproduction_passed) for s in samples] == [[], ["0"], [], ["0"]]
    assert scaling.select_execution(samples, settings, ran=True) == 1


def test_the_verifier_prompt_fits_and_sft_moves_its_scores_toward_the_labels(tmp_path):
    config = tiny_cpu.get_config()
    tokenizer = tokenizer_for(config.model)
    long = verifier.verifier_prompt(tokenizer, "issue " * 2000, "step " * 5000, "+x\n" * 3000, 512)
    assert len(long) <= 510
    prompts = [verifier.verifier_prompt(tokenizer, f"bug {i} in the parser", f"view file {i}", f"+fix {i}\n", 256)
               for i in range(4)]
    rows = [verifier.verifier_example(tokenizer, p, resolved=(i % 2 == 0)) for i, p in enumerate(prompts)]
    assert [r["target_ids"][0] for r in rows] == [verifier.answer_ids(tokenizer)[i % 2] for i in range(4)]
    config.sft.num_steps, config.sft.batch_size, config.sft.max_len = 12, 8, 256  # 8: the fake devices
    config.sft.learning_rate = 3e-3
    config.logging.progress_bar = False
    trainer = verifier.VerifierTrainer(config, tmp_path / "verifier", rows)
    params = trainer.run()
    scores = verifier.verifier_scores(trainer.policy.model_config, params, tokenizer, prompts, batch_size=3)
    trainer.close()
    assert all(0.0 < s < 1.0 for s in scores)
    assert min(scores[0], scores[2]) > max(scores[1], scores[3])  # YES rows above NO rows
    metrics = [json.loads(line) for line in (tmp_path / "verifier" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    with pytest.raises(ValueError, match="no labelled trajectories"):
        verifier.VerifierTrainer(config, tmp_path / "empty", [])
