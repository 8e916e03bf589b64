"""Loading a run's workdir: required keys strict, optional keys tolerant, errors name file, line and key."""

import json
import math

import pytest

from swerl_jax.analysis.runs import RunFormatError, load_metrics, load_rollouts, load_run, rollout_path
from swerl_jax.runs.metrics import MetricsWriter

rollouts_path = rollout_path


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rollout(step, group, sample, reward, **extra):
    return {"step": step, "prompt_id": f"p{group}", "group": group, "sample": sample, "reward": reward, **extra}


def test_roundtrip_sorted_and_optional_keys_filled(tmp_path):
    write_jsonl(tmp_path / "metrics.jsonl", [{"step": 2, "reward/mean": 0.5}, {"step": 1, "reward/mean": 0.25,
                                                                                "kl": None}])
    write_jsonl(rollouts_path(tmp_path, 1), [_rollout(1, 1, 0, -1.0, format_error="no_blocks"),
                                             _rollout(1, 0, 1, 0.5, completion="abcd"), _rollout(1, 0, 0, 1)])
    run = load_run(tmp_path)
    assert [m["step"] for m in run.metrics] == [1, 2]
    assert [(r["group"], r["sample"]) for r in run.rollouts] == [(0, 0), (0, 1), (1, 0)]
    first, with_text, error = run.rollouts
    assert first["reward"] == 1.0 and isinstance(first["reward"], float)
    assert first["advantage"] is None and first["format_error"] is None and first["truncated"] is None
    # No token count logged: the character count stands in, flagged as such.
    assert with_text["completion_len"] == 4 and with_text["completion_len_unit"] == "chars"
    assert error["format_error"] == "no_blocks"
    assert run.steps == [1]
    assert run.metric("reward/mean") == ([1, 2], [0.25, 0.5])
    assert run.metric("kl") == ([], [])  # null values are skipped
    assert rollouts_path(tmp_path, 12).name == "step_000012.jsonl"


def test_metric_skips_nan_and_takes_aliases(tmp_path):
    write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "kl": math.nan, "reward_mean": 0.5},
                                             {"step": 2, "kl": 0.1, "reward_mean": 0.7}])
    run = load_run(tmp_path)
    assert run.metric("kl") == ([2], [0.1])
    assert run.metric("reward/mean", "reward_mean") == ([1, 2], [0.5, 0.7])
    assert run.metric("reward/mean") == ([], [])


def test_torn_last_line_is_skipped(tmp_path):
    # The trainer crashed while writing step 3: that line is incomplete and has no newline.
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    assert [m["step"] for m in load_metrics(tmp_path)] == [1, 2]


def test_missing_required_key_names_file_line_and_key(tmp_path):
    row = _rollout(3, 0, 0, 0.5)
    del row["prompt_id"]
    write_jsonl(rollouts_path(tmp_path, 3), [_rollout(3, 0, 1, 0.1), row])
    with pytest.raises(RunFormatError, match=r"step_000003\.jsonl:2: missing required key\(s\) \['prompt_id'\]"):
        load_rollouts(tmp_path)


def test_null_required_key_is_missing(tmp_path):
    write_jsonl(rollouts_path(tmp_path, 1), [_rollout(1, 0, 0, None)])
    with pytest.raises(RunFormatError, match=r"\['reward'\]"):
        load_rollouts(tmp_path)


def test_bad_json_and_bad_types(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{not json\n')
    with pytest.raises(RunFormatError, match=r"metrics\.jsonl:2: not valid JSON"):
        load_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"reward/mean": 1}\n')
    with pytest.raises(RunFormatError, match=r"metrics\.jsonl:1: missing required key\(s\) \['step'\]"):
        load_metrics(tmp_path)
    write_jsonl(rollouts_path(tmp_path, 1), [_rollout(1, "x", 0, 0.5)])
    with pytest.raises(RunFormatError, match="step_000001.jsonl row 1: step/group/sample must be integers"):
        load_rollouts(tmp_path)


def test_step_mismatch_with_file_name(tmp_path):
    write_jsonl(rollouts_path(tmp_path, 4), [_rollout(5, 0, 0, 0.5)])
    with pytest.raises(RunFormatError, match="step 5 differs from the file's step 4"):
        load_rollouts(tmp_path)


def test_select_steps_and_ignore_other_files(tmp_path):
    for step in (1, 2, 3):
        write_jsonl(rollouts_path(tmp_path, step), [_rollout(step, 0, 0, step / 10)])
    (tmp_path / "rollouts" / "notes.txt").write_text("not a step file")
    assert [r["step"] for r in load_rollouts(tmp_path, steps=[1, 3])] == [1, 3]
    assert load_metrics(tmp_path) == []  # metrics.jsonl is optional when rollouts exist
    assert load_run(tmp_path).steps == [1, 2, 3]


def test_missing_or_empty_workdir(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_run(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="has neither metrics.jsonl nor rollouts"):
        load_run(tmp_path)


def test_reads_what_the_trainers_metrics_writer_writes(tmp_path):
    with MetricsWriter(tmp_path, total_steps=2, tensorboard=False, progress=False) as writer:
        for step in (1, 2):
            writer.write(step, {"reward": {"mean": step / 4, "std": 0.1}, "kl": 0.01 * step,
                                "format_error": {"no_blocks": 0.5}})
            writer.write_rollouts(step, [{**_rollout(step, 0, g, g / 2), "completion": "x" * g, "advantage": g - 0.5,
                                          "reward_info": {"similarities": []}} for g in range(2)])
    run = load_run(tmp_path)
    assert run.metric("reward/mean") == ([1, 2], [0.25, 0.5])
    assert run.metric("kl") == ([1, 2], [0.01, 0.02])
    assert run.metric("format_error/no_blocks") == ([1, 2], [0.5, 0.5])
    assert [(r["step"], r["sample"], r["reward"], r["advantage"]) for r in run.rollouts] == \
        [(1, 0, 0.0, -0.5), (1, 1, 0.5, 0.5), (2, 0, 0.0, -0.5), (2, 1, 0.5, 0.5)]
    assert run.rollouts[0]["reward_info"] == {"similarities": []}  # extra keys are kept
