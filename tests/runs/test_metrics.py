"""MetricsWriter: JSONL + TensorBoard + rollouts; resume safety (a resumed run's files equal an uninterrupted one)."""

import io
import json
import os
import signal
import struct
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from tensorboardX.proto import event_pb2

from swerl_jax.runs.metrics import MetricsWriter, flatten_metrics, read_metrics, rollout_path


def _events(logdir):
    """(tag, step, value) of every scalar in the TFRecord event files, in file order. Purge events are not
    honoured: the files must hold each step exactly once, whatever reader opens them."""
    out = []
    for f in sorted(logdir.glob("events.*")):
        data = f.read_bytes()
        pos = 0
        while pos < len(data):
            (n,) = struct.unpack("<Q", data[pos:pos + 8])
            ev = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
            pos += 12 + n + 4  # length, its crc, payload, payload crc
            for v in ev.summary.value:
                out.append((v.tag, ev.step, round(v.simple_value, 6)))
    return out


def _run(workdir, steps, resume_step=None, bar=None):
    bar = io.StringIO() if bar is None else bar
    with MetricsWriter(workdir, total_steps=6, resume_step=resume_step, progress_file=bar) as w:
        for s in steps:
            w.write(s, {"loss": jnp.float32(s * 0.5), "reward_mean": np.float64(s / 10),
                        "format_error": {"no_solution": s / 100}})
            w.write_rollouts(s, [{"prompt_id": f"p{s}", "completion": "x", "reward": 0.5, "advantage": -0.1,
                                  "reward_info": {"similarity": np.float32(0.5)}}])


def test_rows_flattening_rollouts_and_tensorboard(tmp_path):
    bar = io.StringIO()
    _run(tmp_path, range(3), bar=bar)
    assert "3/6" in bar.getvalue() and "reward_mean=0.2" in bar.getvalue()  # the tqdm bar: count, ETA, postfix
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows[2] == {"step": 2, "loss": 1.0, "reward_mean": 0.2, "format_error/no_solution": 0.02}
    roll = [json.loads(x) for x in rollout_path(tmp_path, 1).read_text().splitlines()]
    assert roll == [{"step": 1, "prompt_id": "p1", "completion": "x", "reward": 0.5, "advantage": -0.1,
                     "reward_info": {"similarity": 0.5}}]
    assert rollout_path(tmp_path, 1).name == "step_000001.jsonl"
    assert ("loss", 2, 1.0) in _events(tmp_path / "tensorboard")
    with pytest.raises(TypeError, match="'a/b' is not a scalar"):
        flatten_metrics({"a": {"b": np.zeros(3)}})
    with MetricsWriter(tmp_path / "w", progress=False, tensorboard=False) as w:
        with pytest.raises(ValueError, match="lacks"):
            w.write_rollouts(0, [{"prompt_id": "p", "completion": "c", "reward": 1.0}])


def test_resume_equals_uninterrupted(tmp_path):
    _run(tmp_path / "ref", range(6))
    # interrupted: steps 0..4 logged, checkpoint at step 2, then killed mid-line
    _run(tmp_path / "cut", range(5))
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "lo')
    _run(tmp_path / "cut", range(3, 6), resume_step=2)
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    assert (cut / "metrics.jsonl").read_text() == (ref / "metrics.jsonl").read_text()
    assert sorted(p.name for p in (cut / "rollouts").iterdir()) == sorted(p.name for p in (ref / "rollouts").iterdir())
    assert sorted(_events(cut / "tensorboard")) == sorted(_events(ref / "tensorboard"))
    # a fresh start (no checkpoint restored) replaces what an aborted attempt left
    _run(cut, range(2))
    assert [r["step"] for r in read_metrics(cut / "metrics.jsonl")] == [0, 1]
    assert sorted(p.name for p in (cut / "rollouts").iterdir()) == ["step_000000.jsonl", "step_000001.jsonl"]


def test_non_main_process_writes_nothing(tmp_path):
    with MetricsWriter(tmp_path / "w", is_main=False) as w:
        assert w.write(0, {"loss": 1.0}) == {"step": 0, "loss": 1.0}
        assert w.write_rollouts(0, [{"prompt_id": "p"}]) is None
    assert not (tmp_path / "w").exists()


_KILLED_WRITER = """
import os, signal, sys
from swerl_jax.runs.metrics import MetricsWriter
w = MetricsWriter(sys.argv[1], total_steps=6, progress=False)
for s in range(5):
    w.write(s, {"loss": s * 0.5, "reward_mean": s / 10, "format_error": {"no_solution": s / 100}})
    if s == 0:
        w.flush()  # step 0 reaches the event file; steps 1-4 stay in TensorBoard's 30 s buffer
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_tensorboard_after_sigkill_and_resume_equals_uninterrupted(tmp_path):
    """A real SIGKILL loses TensorBoard's buffered events (steps 1-4 here) while metrics.jsonl has them; resuming
    from checkpoint 2 must show steps 0-5 once each, as the uninterrupted run does (before: 1-2 missing)."""
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    with MetricsWriter(ref, total_steps=6, progress=False) as w:
        for s in range(6):
            w.write(s, {"loss": s * 0.5, "reward_mean": s / 10, "format_error": {"no_solution": s / 100}})
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(cut)], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert [r["step"] for r in read_metrics(cut / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    with MetricsWriter(cut, total_steps=6, resume_step=2, progress=False) as w:
        for s in range(3, 6):
            w.write(s, {"loss": s * 0.5, "reward_mean": s / 10, "format_error": {"no_solution": s / 100}})
    assert _events(cut / "tensorboard") == _events(ref / "tensorboard")
    assert len(_events(ref / "tensorboard")) == 18 and os.listdir(cut / "tensorboard")


def test_progress_bar_names_the_stage(tmp_path):
    bar = io.StringIO()
    with MetricsWriter(tmp_path, total_steps=2, tensorboard=False, progress_file=bar, desc="sft") as w:
        w.write(0, {"loss": 1.0})
    assert bar.getvalue().lstrip("\r").startswith("sft:")


def test_progress_bar_names_reward_failures(tmp_path):
    # issue 57 item 4: a reward raising on every rollout showed reward_mean=-1 beside the bar, like malformed answers
    bar = io.StringIO()
    with MetricsWriter(tmp_path, total_steps=2, tensorboard=False, progress_file=bar) as w:
        w.write(0, {"reward_mean": 0.5, "reward_failure_rate": 0.0})
        assert "reward_failure_rate" not in bar.getvalue()
        w.write(1, {"reward_mean": -1.0, "reward_failure_rate": 1.0})
    assert "reward_failure_rate=100%" in bar.getvalue()


def test_the_bar_shows_the_step_in_flight_and_clears_it(tmp_path):
    """Issue 57 item 7: a 6-minute first GRPO step showed `0/2` and nothing else; the trainer's activity is shown
    beside the bar's label while the step runs (`TrainLoop.report`)."""
    out = io.StringIO()
    writer = MetricsWriter(tmp_path, total_steps=2, tensorboard=False, progress_file=out, desc="grpo")
    writer.activity("step 1: generating request 1/1 (2 prompts x 8): compiling generate_shared")
    assert "grpo | step 1: generating request 1/1 (2 prompts x 8): compiling generate_shared: " in out.getvalue()
    writer.activity("")
    writer.write(1, {"loss": 0.5})
    writer.close()
    assert "grpo:  50%" in out.getvalue().rsplit("step 1:", 1)[1]  # the label alone again after the step
