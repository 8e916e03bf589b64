"""The oracle-file repair metric: hand-checked figures on scripted answers, and the CLI end to end on the tiny model
(a real engine, a published policy version, the real reward)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from swerl_jax.data.records import write_records
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.eval import repair_score as rs
from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.rl import heldout
from swerl_jax.sampler import weights
from swerl_jax.tokenizer import load_tokenizer
from tests.eval.fake_runs import STEP, small_run

RECORDS = synthetic_records(4, seed=9)


def _scripted(answers_per_record):
    def generate(prompts):
        assert all(isinstance(p, np.ndarray) and p.dtype == np.int32 for p in prompts)
        return [answers_per_record(i) for i in range(len(prompts))]
    return generate


def test_gold_answers_score_100_and_malformed_score_0():
    rows: list = []
    gold = heldout.repair_score(RECORDS, _scripted(lambda i: [oracle_solution(RECORDS[i])]), load_tokenizer(), 1024,
                           rows_out=rows)
    assert (gold.format_rate, gold.score, gold.mean_reward, gold.exact_rate) == (1.0, 100.0, 1.0, 1.0)
    assert gold.scored == gold.answers == 4 and [r["reward"] for r in rows] == [1.0] * 4
    bad = heldout.repair_score(RECORDS, _scripted(lambda i: ["no tags at all"]), load_tokenizer(), 1024)
    assert (bad.format_rate, bad.score, bad.mean_reward, bad.exact_rate) == (0.0, 0.0, -1.0, 0.0)


def test_mixed_answers_by_hand():
    # record 0: gold (1.0); 1: malformed (-1 -> 0 in the score); 2 and 3: a well-formed edit that changes nothing
    # the oracle changes (search text found, replaced by itself plus a comment): reward in (0, 1)
    def answers(i):
        if i == 0:
            return [oracle_solution(RECORDS[0])]
        if i == 1:
            return ["<think>x</think><solution>nothing</solution>"]
        path, content = next(iter(RECORDS[i]["code_context"].items()))
        line = content.splitlines()[0]
        return [f"<think>t</think>\n<solution>\n```python\n### {path}\n<<<<<<< SEARCH\n{line}\n=======\n"
                f"{line}  # touched\n>>>>>>> REPLACE\n```\n</solution>"]
    rows: list = []
    got = heldout.repair_score(RECORDS, _scripted(answers), load_tokenizer(), 1024, rows_out=rows)
    r = [row["reward"] for row in rows]
    assert r[0] == 1.0 and r[1] == -1.0 and all(0.0 <= x < 1.0 for x in r[2:])
    assert got.format_rate == 0.75 and got.exact_rate == 0.25
    assert got.score == 100 * (1.0 + r[2] + r[3]) / 4 and got.mean_reward == (1.0 - 1.0 + r[2] + r[3]) / 4
    assert rows[1]["format_error"] == "no_blocks"


def test_testbed_records_get_the_execution_resolved_rate_from_their_hidden_tests():
    """Records with hidden tests (the testbed's) are also run: gold resolves, a malformed answer is unresolved
    without running, and a well-formed edit that leaves the bug in fails its tests; records without hidden tests
    report no resolved rate (None, not 0)."""
    from swerl_jax.testbed.tasks import generate_tasks

    tasks = generate_tasks(3, seed=5, max_distractors=0)

    def answers(i):
        if i == 0:
            return [oracle_solution(tasks[0]), "no tags"]
        path = next(p for p in tasks[i]["oracle_new_content"])
        line = tasks[i]["code_context"][path].splitlines()[0]
        return [f"<think>t</think>\n<solution>\n```python\n### {path}\n<<<<<<< SEARCH\n{line}\n=======\n"
                f"{line}  # touched\n>>>>>>> REPLACE\n```\n</solution>", oracle_solution(tasks[i])]
    rows: list = []
    got = heldout.repair_score(tasks, _scripted(answers), load_tokenizer(), 1024, "compact", rows_out=rows)
    assert [r["resolved"] for r in rows] == [True, False, False, True, False, True]
    assert [r["test_status"] for r in rows][:3] == ["resolved", "malformed", "failed"]
    assert got.resolved_rate == 0.5 and got.metrics()["eval/resolved_rate"] == 0.5
    assert "resolved 50.0%" in got.line()
    plain = heldout.repair_score(RECORDS, _scripted(lambda i: [oracle_solution(RECORDS[i])]), load_tokenizer(), 1024)
    assert plain.resolved_rate is None and "eval/resolved_rate" not in plain.metrics()


def test_prompts_over_budget_are_skipped_and_counted():
    got = heldout.repair_score(RECORDS, _scripted(lambda i: [oracle_solution(RECORDS[i])]), load_tokenizer(), 8)
    assert got.scored == 0 and got.skipped == {"prompt longer than data.max_prompt_len": 4}


def test_cli_on_a_published_policy_version(tmp_path, capsys):
    """Also a subset (issue 57 item 7: no option to score a subset of held-out records): --instance_ids / --limit
    choose the records, the summary says which, an id the records lack is one line with the closest id, and the
    progress bar names its stage."""
    write_records(tmp_path / "recs.jsonl", RECORDS)
    params = init_params(get_model_config("demo-7m"), jax.random.PRNGKey(3))
    weights.publish(tmp_path / "policy", params, 5)
    common = ["--config=experiments/tiny_cpu.py", f"--records={tmp_path / 'recs.jsonl'}",
              f"--weights={tmp_path / 'policy'}", "--max_new_tokens=8"]
    ids = [r["instance_id"] for r in RECORDS]
    with pytest.raises(ValueError, match=rf"--instance_ids: '{ids[1]}z' is not a record .*did you mean '{ids[1]}'"):
        rs.main([*common, f"--out={tmp_path / 'bad'}", f"--instance_ids={ids[1]}z"])
    result = rs.main([*common, f"--out={tmp_path / 'out'}", f"--instance_ids={ids[3]},{ids[1]},{ids[2]}",
                      "--limit=2"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "out" / "repair.jsonl").read_text().splitlines()]
    assert result.scored == summary["scored"] == len(rows) == 2 and summary["policy_version"] == 5
    assert [r["instance_id"] for r in rows] == [ids[1], ids[2]]
    assert summary["selected"] == {"instance_ids": f"{ids[3]},{ids[1]},{ids[2]}", "limit": 2, "of_records": 4}
    out = capsys.readouterr()
    assert "scoring 2 of the 4 records (--instance_ids / --limit)" in out.out
    assert "repair_score: generating" in out.err
    # an untrained 7M model writes 8 tokens of noise: every answer is malformed, exactly as the reward says
    assert summary["format_rate"] == 0.0 and all(row["reward"] == -1.0 for row in rows)


def test_cli_never_scores_a_random_init_silently(tmp_path):
    """Issue 31.3: `--weights RUN/polcy` used to exit 0 after scoring a seeded init as `policy_version 0`."""
    write_records(tmp_path / "recs.jsonl", RECORDS[:1])
    weights.publish(tmp_path / "run" / "policy", init_params(get_model_config("demo-7m"), jax.random.PRNGKey(3)), 2)
    common = ["--config=experiments/tiny_cpu.py", f"--records={tmp_path / 'recs.jsonl'}", f"--out={tmp_path / 'o'}",
              "--max_new_tokens=4"]
    with pytest.raises(FileNotFoundError, match=r"polcy: no such directory \(did you mean .*run/policy\?\)"):
        rs.main([*common, f"--weights={tmp_path / 'run' / 'polcy'}"])
    with pytest.raises(ValueError, match="its model has no weights .* --random_init"):
        rs.main(common)
    assert not (tmp_path / "o").exists()  # nothing was written for a run that did not happen
    rs.main([*common, "--random_init"])
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["evaluated"]["what"] == "a random init of demo-7m (seed 0)" and summary["policy_version"] is None
    rs.main([*common, f"--weights={tmp_path / 'run' / 'policy'}", f"--out={tmp_path / 'o2'}"])  # (the last wins)
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert summary["policy_version"] == 2 and "policy version 2 (GRPO step 2)" in summary["evaluated"]["what"]


def test_nothing_scored_is_an_error_not_a_score_of_zero(tmp_path):
    """Held-out check: records none of which could be scored (all prompts over budget, or none at all) gave
    'score 0.0 (0 of N records)' with exit 0."""
    (tmp_path / "empty.jsonl").write_text("")
    weights.publish(tmp_path / "policy", init_params(get_model_config("demo-7m"), jax.random.PRNGKey(3)), 1)
    with pytest.raises(ValueError, match="none of the 0 records could be scored"):
        rs.main(["--config=experiments/tiny_cpu.py", f"--records={tmp_path / 'empty.jsonl'}",
                 f"--out={tmp_path / 'o'}", f"--weights={tmp_path / 'policy'}", "--max_new_tokens=4"])
    assert not (tmp_path / "o" / "summary.json").exists()
    with pytest.raises(ValueError, match="--samples 0: must be >= 1"):
        rs.main(["--config=experiments/tiny_cpu.py", f"--records={tmp_path / 'empty.jsonl'}",
                 f"--out={tmp_path / 'o'}", "--samples=0", "--random_init"])


def test_the_held_out_score_is_eval_reward_kinds_whatever_reward_the_run_trains_with(tmp_path):
    """A discrete-reward run's held-out "score" used to be its exact-match rate: the reward ablation compared two
    different metrics. The evaluator scores with eval.reward_kind (continuous by default) and keeps its rows."""
    import types

    from experiments import tiny_cpu
    from swerl_jax.resolve import resolve_config
    from swerl_jax.rl.build import RepairEvaluator

    touched = []
    for record in RECORDS:  # a well-formed edit that is not the fix: similarity in (0, 1), discrete 0
        path, content = next(iter(record["code_context"].items()))
        line = content.splitlines()[0]
        touched.append(f"<think>t</think>\n<solution>\n```python\n### {path}\n<<<<<<< SEARCH\n{line}\n=======\n"
                       f"{line}  # touched\n>>>>>>> REPLACE\n```\n</solution>")

    class Sampler:
        def generate(self, prompts, sampling, num_samples, seed, min_policy_version):
            assert sampling.temperature == 0.0 and num_samples == 1
            start = len(self.seen)
            self.seen += prompts
            return [[types.SimpleNamespace(text=touched[start + i])] for i in range(len(prompts))]

    def score(reward_kind: str, eval_kind: str) -> dict:
        c = tiny_cpu.get_config()
        c.reward.kind, c.eval.reward_kind, c.eval.every_steps = reward_kind, eval_kind, 1
        sampler = Sampler()
        sampler.seen = []
        out = tmp_path / f"{reward_kind}-{eval_kind}"
        return RepairEvaluator(resolve_config(c, check_files=False), RECORDS, out)(sampler, 3), out

    continuous, _ = score("continuous", "continuous")
    discrete_run, rows_dir = score("discrete", "continuous")
    assert discrete_run == continuous and 0 < continuous["eval/score"] < 100  # the same metric for both arms
    exact, _ = score("discrete", "discrete")
    assert exact["eval/score"] == 0.0  # what the discrete arm used to report
    rows = [json.loads(x) for x in (rows_dir / "heldout_000003.jsonl").read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == [r["instance_id"] for r in RECORDS]
    c = tiny_cpu.get_config()
    c.eval.every_steps, c.eval.reward_kind = 1, "contnuous"
    with pytest.raises(ValueError, match="eval.reward_kind='contnuous' is unknown"):
        resolve_config(c, check_files=False)


def test_paths_resolve_from_the_current_directory(tmp_path, monkeypatch):
    """Issue 46 item 9: the README's `--weights runs/X/policy` failed with Orbax's "Checkpoint path should be
    absolute"; `--config=experiments/...` is found from outside the clone as data paths are."""
    small_run(tmp_path / "runs" / "X")
    write_records(tmp_path / "recs.jsonl", RECORDS[:1])
    monkeypatch.chdir(tmp_path)
    rs.main(["--config=experiments/tiny_cpu.py", "--records=recs.jsonl", "--out=out", "--weights=runs/X/policy",
             "--max_new_tokens=4"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["weights"] == str(tmp_path / "runs" / "X" / "policy") and summary["policy_version"] == STEP


def test_weights_of_another_model_are_one_line_naming_both_models(tmp_path):
    """Issue 46 item 10: a run's weights of another model than the config's gave Orbax's tree-structure mismatch
    (suggesting `partial_restore=True`); the run's config.json beside policy/ names its model."""
    from swerl_jax.model.convert import CheckpointError

    small_run(tmp_path / "T", model="tiny")
    write_records(tmp_path / "recs.jsonl", RECORDS[:1])
    with pytest.raises(CheckpointError) as err:
        rs.main(["--config=experiments/tiny_cpu.py", f"--records={tmp_path / 'recs.jsonl'}", f"--out={tmp_path / 'o'}",
                 f"--weights={tmp_path / 'T' / 'policy'}", "--max_new_tokens=4"])
    (line,) = str(err.value).splitlines()
    assert line.startswith(f"--weights {tmp_path / 'T' / 'policy'}: the weights are model.name='tiny' "
                           f"({tmp_path / 'T' / 'config.json'}), but experiments/tiny_cpu.py is "
                           "model.name='demo-7m'"), line
    assert not (tmp_path / "o").exists()


def test_other_settings_into_an_existing_out_are_refused_as_eval_run_refuses_them(tmp_path):
    """Issue 46.7: another --temperature or config key into an existing --out overwrote summary.json and
    repair.jsonl; the same command again starts over, as it says."""
    write_records(tmp_path / "recs.jsonl", RECORDS[:1])
    common = ["--config=experiments/tiny_cpu.py", f"--records={tmp_path / 'recs.jsonl'}", f"--out={tmp_path / 'o'}",
              "--max_new_tokens=4", "--random_init"]
    rs.main(common)
    written = [(tmp_path / "o" / name).read_text() for name in ("summary.json", "repair.jsonl")]
    with pytest.raises(ValueError, match=r"o holds results of other settings \(--temperature: 0.0 -> 1.0\): "
                                         r"choose another --out"):
        rs.main([*common, "--temperature=1.0"])
    with pytest.raises(ValueError, match=r"\(config.seed: 0 -> 3\)"):
        rs.main([*common, "--config.seed=3"])
    assert [(tmp_path / "o" / name).read_text() for name in ("summary.json", "repair.jsonl")] == written
    rs.main([*common, "--temperature=0", "--config.seed=0"])  # the same settings: run again, into the same --out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())  # names what it scored, and how it failed
    assert summary["config_overrides"] == {"seed": "0"} and summary["config"] == "experiments/tiny_cpu.py"
    assert sum(summary["format_errors"].values()) == summary["answers"] - round(summary["format_rate"]
                                                                                * summary["answers"])
    (tmp_path / "o" / "repair_settings.json").unlink()  # results whose settings are not recorded: not overwritten
    with pytest.raises(ValueError, match=r"holds repair-score results whose settings are not recorded"):
        rs.main(common)


def test_help_shows_the_whole_description(capsys):
    """Issue 46.15: `repair_score --help` cut its description at "the policy's" (the docstring's first line)."""
    with pytest.raises(SystemExit) as exit_:
        rs.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "the policy's answer, scored by the SWE-RL reward" in " ".join(out.split())
    assert "format_rate  share of answers that are well formed" in out  # the metrics' table, as laid out


def test_records_typed_relative_are_the_file_they_name_from_the_current_directory(tmp_path, monkeypatch):
    """Held-out check of issue 46, item 1: --records was recorded as typed, so `recs.jsonl` from another directory
    (another file) overwrote the results with exit 0, and the same file typed absolute was refused."""
    for folder, n in (("a", 2), ("b", 1)):
        (tmp_path / folder).mkdir()
        write_records(tmp_path / folder / "recs.jsonl", RECORDS[:n])
    out = tmp_path / "o"
    common = [f"--config={rs.__file__.rsplit('/swerl_jax/', 1)[0]}/experiments/tiny_cpu.py", f"--out={out}",
              "--max_new_tokens=4", "--random_init"]
    monkeypatch.chdir(tmp_path / "a")
    rs.main(["--records=recs.jsonl", *common])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records_files"] == [str(tmp_path / "a" / "recs.jsonl")] and summary["records"] == 2
    written = [(out / name).read_text() for name in ("summary.json", "repair.jsonl")]
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(ValueError, match=r"holds results of other settings \(--records: "):
        rs.main(["--records=recs.jsonl", *common])
    assert [(out / name).read_text() for name in ("summary.json", "repair.jsonl")] == written
    rs.main([f"--records={tmp_path / 'a' / 'recs.jsonl'}", *common])  # the same file, typed absolute: the same
    # and the same config file, typed as found from the repository root: the same settings too
    rs.main([f"--records={tmp_path / 'a' / 'recs.jsonl'}", "--config=experiments/tiny_cpu.py", *common[1:]])


def test_invalid_records_are_counted_and_named_not_silently_dropped(tmp_path, capsys):
    """Day-three check: SWE-bench instances as --records said "none of the 0 records could be scored (no
    records)" for a file of 500, and a file with some invalid records was scored on the rest without a word."""
    weights.publish(tmp_path / "policy", init_params(get_model_config("demo-7m"), jax.random.PRNGKey(3)), 1)
    instance = {"instance_id": "astropy__astropy-12907", "repo": "astropy/astropy", "base_commit": "d16bfe0",
                "patch": "diff --git a/x b/x\n", "problem_statement": "..."}
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance) + "\n")
    common = ["--config=experiments/tiny_cpu.py", f"--weights={tmp_path / 'policy'}", "--max_new_tokens=4"]
    with pytest.raises(ValueError, match=r"instances.jsonl: all 1 records are invalid \(first: record "
                                         r"'astropy__astropy-12907 .*instances.jsonl:1\)': field '.*': missing field\);"
                                         r" SWE-bench instances become PR records with python -m swerl_jax.data "
                                         r"import-swebench; nothing written"):
        rs.main([*common, f"--records={tmp_path / 'instances.jsonl'}", f"--out={tmp_path / 'o'}"])
    assert not (tmp_path / "o").exists()
    write_records(tmp_path / "recs.jsonl", RECORDS[:2])
    with open(tmp_path / "recs.jsonl", "a") as f:
        f.write(json.dumps(instance) + "\n")
    result = rs.main([*common, f"--records={tmp_path / 'recs.jsonl'}", f"--out={tmp_path / 'o'}"])
    assert result.records == 2
    assert "skipped 1 invalid records of 3 (" in capsys.readouterr().out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert sum(summary["invalid_records"].values()) == 1


def test_records_that_cannot_be_prompted_are_skipped_with_their_reason(shared_data, monkeypatch):
    from swerl_jax.data import prompts
    from tests.data.test_prompts import appended_at_end_record

    records = [*RECORDS[:2], appended_at_end_record(shared_data)]  # the last raised IndexError (issue 57 item 1)
    got = heldout.repair_score(records, _scripted(lambda i: [oracle_solution(records[i])]), load_tokenizer(), 1024)
    assert got.scored == 3 and got.skipped == {} and got.exact_rate == 1.0
    short = heldout.repair_score(records, _scripted(lambda i: [oracle_solution(records[i])]), load_tokenizer(), 200)
    assert short.scored < 3 and "skipped" in short.line() and "data.max_prompt_len" in short.line()
    real = prompts.build_prompt
    monkeypatch.setattr(prompts, "build_prompt",
                        lambda r, *a, **k: [][0] if r is records[0] else real(r, *a, **k))
    broken = heldout.repair_score(records, _scripted(lambda i: [oracle_solution(records[i + 1])]), load_tokenizer(),
                                  1024)
    assert broken.scored == 2 and broken.skipped == {"prompt could not be built (IndexError)": 1}
    assert "skipped 1: prompt could not be built (IndexError)" in broken.line()


def test_progress_bar_names_each_stage_and_counts_what_generate_reports(capsys):
    """Issue 57 item 7: repair_score printed nothing for 2 minutes. The bar names its stage and counts the prompts
    the generator reports as they come back."""
    calls = []

    def generate(prompts, progress=None):
        calls.append(progress)
        for _ in prompts:
            progress(1)
        return [[oracle_solution(RECORDS[i])] for i in range(len(prompts))]

    got = rs.repair_score(RECORDS, generate, load_tokenizer(), 1024, progress=True)
    err = capsys.readouterr().err
    assert got.exact_rate == 1.0 and calls[0] is not None
    for stage in ("repair_score: prompting", "repair_score: generating", "repair_score: scoring"):
        assert stage in err
    assert "4/4 [" in err
    rs.repair_score(RECORDS, _scripted(lambda i: ["x"]), load_tokenizer(), 1024)  # off: a one-argument generate
    assert capsys.readouterr().err == ""

