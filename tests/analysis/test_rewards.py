"""Reward tables: scoring predictions against gold patches, summaries, format-error taxonomy, Markdown."""

import json
import math
import statistics

import pytest

from swerl_jax.analysis.rewards import (
    changed_lines,
    format_error_table,
    format_errors_by_step,
    format_number,
    group_mean,
    resolve_data_dir,
    score_predictions,
    summarize,
    to_markdown,
)
from swerl_jax.reward import calculate_reward_unidiff

GOLD = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,3 @@
 def f(x):
-    return x + 1
+    return x + 2
 # end
"""
OTHER = GOLD.replace("x + 2", "x * 2")


def _write(tmp_path, gold_rows, pred_rows):
    (tmp_path / "gold.json").write_text(json.dumps(gold_rows))
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pred_rows))
    return tmp_path / "preds.jsonl", tmp_path / "gold.json"


def test_changed_lines_hand_count():
    assert changed_lines(GOLD) == 2
    assert changed_lines("") == 0


def test_score_predictions_exact_partial_empty(tmp_path):
    preds, gold = _write(tmp_path, [{"instance_id": "a", "patch": GOLD}, {"instance_id": "b", "patch": GOLD}],
                         [{"instance_id": "a", "model_patch": GOLD}, {"instance_id": "b", "model_patch": OTHER},
                          {"instance_id": "a", "model_patch": None}])
    exact, partial, empty = score_predictions(preds, gold)
    assert exact["reward"] == 1.0 and exact["exact"] == 1.0 and not exact["empty"]
    assert partial["reward"] == calculate_reward_unidiff([GOLD], [OTHER])[0]
    assert 0.0 < partial["reward"] < 1.0 and partial["exact"] == 0.0
    assert empty["reward"] == 0.0 and empty["empty"] and empty["pred_lines"] == 0
    assert exact["gold_lines"] == 2 and exact["gold_files"] == 1


def test_score_predictions_errors_name_file_and_instance(tmp_path):
    preds, gold = _write(tmp_path, [{"instance_id": "a", "patch": GOLD}], [{"instance_id": "zzz", "model_patch": ""}])
    with pytest.raises(ValueError, match=r"preds\.jsonl row 0: instance 'zzz' has no gold patch"):
        score_predictions(preds, gold)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        score_predictions(tmp_path / "nope.jsonl", gold)
    preds, gold = _write(tmp_path, [{"instance_id": "a"}], [])
    with pytest.raises(ValueError, match=r"gold\.json row 0: missing 'instance_id' or 'patch'"):
        score_predictions(preds, gold)


def test_real_gpt4_predictions(shared_data):
    rows = score_predictions(shared_data / "swebench_lite_gpt4_preds.jsonl", shared_data / "swebench_lite.json")
    assert len(rows) == 168
    assert sum(r["empty"] for r in rows) == 4  # the data README counts 4 empty patches
    assert all(r["reward"] == 0.0 for r in rows if r["empty"])
    rewards = [r["reward"] for r in rows]
    stats = summarize(rewards)
    assert stats["mean"] == pytest.approx(statistics.fmean(rewards), abs=1e-12)
    # The README's mean 0.24 / median 0.11 is raw-patch difflib; the per-file unidiff reward is deterministic and
    # lands near it: pinned (a change to the reward or the diff parsing shows here).
    assert stats["mean"] == pytest.approx(0.21482581435647216, abs=1e-12)
    assert stats["median"] == pytest.approx(0.10606471373119844, abs=1e-12)
    assert sum(r["exact"] for r in rows) == 2


def test_summarize_against_statistics():
    values = [0.5, -1.0, 1.0, 0.25, math.nan, None]
    s = summarize(values)
    finite = [0.5, -1.0, 1.0, 0.25]
    assert s == {"n": 4, "mean": statistics.fmean(finite), "std": statistics.pstdev(finite), "min": -1.0,
                 "median": statistics.median(finite), "max": 1.0}
    assert summarize([])["n"] == 0 and math.isnan(summarize([])["mean"])


def test_group_mean():
    rows = [{"k": 1, "v": 1.0}, {"k": 0, "v": 2.0}, {"k": 1, "v": 3.0}]
    assert group_mean(rows, "k", "v") == [{"k": 0, "n": 1, "mean": 2.0, "std": 0.0},
                                          {"k": 1, "n": 2, "mean": 2.0, "std": 1.0}]


def test_format_error_taxonomy():
    rollouts = [{"step": 1, "reward": 0.5, "format_error": None},
                {"step": 1, "reward": -1.0, "format_error": "tag_count"},
                {"step": 2, "reward": -1.0, "format_error": "tag_count"}, {"step": 2, "reward": -1.0},
                {"step": 2, "reward": 1.0}]
    assert format_error_table(rollouts) == [{"reason": "ok", "count": 2, "fraction": 0.4},
                                            {"reason": "tag_count", "count": 2, "fraction": 0.4},
                                            {"reason": "unknown", "count": 1, "fraction": 0.2}]
    by_step = format_errors_by_step(rollouts)
    assert by_step == {"tag_count": ([1, 2], [0.5, 1 / 3]), "unknown": ([1, 2], [0.0, 1 / 3])}


def test_to_markdown():
    assert to_markdown([{"a": 1, "b": 0.12345}], digits=2) == "| a | b |\n|---|---|\n| 1 | 0.12 |"
    assert to_markdown([]) == "(no rows)"


def test_small_numbers_keep_their_value():
    """Issue 46 item 4: a learning rate of 2e-4 printed as 0.000. Below 0.1, where fixed decimals would drop
    significant digits, a number keeps `digits` significant ones; zero, larger numbers and nan are unchanged."""
    values = [2e-4, 1e-6, 0.0015, -0.0321, 0.5, 12.34567, 0.0, math.nan, 0.1]
    assert [format_number(v) for v in values] == ["0.0002", "1e-06", "0.0015", "-0.0321", "0.500", "12.346", "0.000",
                                                  "nan", "0.100"]
    assert to_markdown([{"optim.learning_rate": 2e-4}]).splitlines()[-1] == "| 0.0002 |"


def test_resolve_data_dir(tmp_path, monkeypatch):
    assert resolve_data_dir(tmp_path) == tmp_path.resolve()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here").mkdir()
    assert resolve_data_dir("here") == (tmp_path / "here").resolve()
    with pytest.raises(FileNotFoundError, match="data_dir='missing' not found; tried"):
        resolve_data_dir("missing")


def test_reward_service_failures_are_their_own_rows():
    # a timeout scores -1 like a format error but is not one: it used to be counted as "unknown"
    rollouts = [{"step": 1, "reward": -1.0, "format_error": None, "reward_failure": "timeout"},
                {"step": 1, "reward": -1.0, "format_error": "no_edits", "reward_failure": None},
                {"step": 1, "reward": 0.25, "format_error": None, "reward_failure": None}]
    assert format_error_table(rollouts) == [{"reason": "no_edits", "count": 1, "fraction": 1 / 3},
                                            {"reason": "ok", "count": 1, "fraction": 1 / 3},
                                            {"reason": "reward failure: timeout", "count": 1, "fraction": 1 / 3}]
    assert format_errors_by_step(rollouts) == {"no_edits": ([1], [1 / 3]), "reward failure: timeout": ([1], [1 / 3])}
