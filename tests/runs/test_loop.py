"""The trainers' shared loop (swerl_jax/runs/loop.py) on a real Orbax checkpointer and a real Grain iterator: the step
order (metrics, rollouts, checkpoint), resume after a crash without repeating a checkpointed step or skipping data,
host state round trip, and cleanup on failure."""

from __future__ import annotations

import json

import grain
import jax.numpy as jnp
import ml_collections
import pytest

from swerl_jax.runs.checkpoint import Checkpointer, abstract_like
from swerl_jax.runs.loop import TrainLoop


class _Crash(RuntimeError):
    pass


class _Policy:
    def __init__(self) -> None:
        self.state = {"w": jnp.zeros((2,), jnp.float32)}

    def abstract_state(self):
        return abstract_like(self.state)


class CountingLoop(TrainLoop):
    """Adds each step's data item to `w`; crashes in `train_step(crash_at)`; records every hook call."""

    stage = "test"
    save_rollouts = True

    def __init__(self, workdir, num_steps: int, crash_at: int | None = None) -> None:
        self.config = ml_collections.ConfigDict({"logging": {"every_steps": 2, "tensorboard": False,
                                                             "progress_bar": False}})
        self.workdir, self.num_steps, self.crash_at = workdir, num_steps, crash_at
        self.policy = _Policy()
        self.data_iter = iter(grain.MapDataset.range(100).to_iter_dataset())
        self.checkpointer = Checkpointer(workdir, every_steps=1, async_save=False)
        self.is_main = True
        self.calls: list = []
        self.counter = 0

    def train_step(self, step: int) -> tuple[dict, list]:
        if step == self.crash_at:
            raise _Crash(f"step {step}")
        item = int(next(self.data_iter))
        self.policy.state = {"w": self.policy.state["w"] + item}
        self.counter += 1
        self.calls.append(("step", step, item))
        return {"item": float(item)}, [{"prompt_id": step, "completion": "", "reward": 0.0, "advantage": 0.0}]

    def host_state(self) -> dict:
        return {"counter": self.counter}

    def load_host_state(self, state: dict) -> None:
        self.calls.append(("load", state))
        self.counter = state["counter"]

    def before_steps(self, start: int) -> None:
        self.calls.append(("before", start))

    def close(self) -> None:
        self.calls.append(("close",))
        super().close()


def test_fresh_run_logs_every_n_and_last_and_checkpoints_each_step(tmp_path):
    loop = CountingLoop(tmp_path, num_steps=3)
    assert loop.run_loop() == 0
    assert loop.calls == [("before", 0), ("step", 1, 0), ("step", 2, 1), ("step", 3, 2), ("close",)]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 3]  # every_steps=2, and the last step always
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == [
        "step_000001.jsonl", "step_000002.jsonl", "step_000003.jsonl"]
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == [1, 2, 3]


def test_crash_then_resume_repeats_no_checkpointed_step_and_no_data(tmp_path):
    first = CountingLoop(tmp_path, num_steps=4, crash_at=3)
    with pytest.raises(_Crash):
        first.run_loop()
    assert first.calls[-1] == ("close",)  # cleanup runs on failure
    second = CountingLoop(tmp_path, num_steps=4)
    assert second.run_loop() == 2
    # resumed from checkpoint 2: host state restored before the sampler hook, then steps 3-4 on items 2, 3
    assert second.calls == [("load", {"counter": 2}), ("before", 2), ("step", 3, 2), ("step", 4, 3), ("close",)]
    assert second.counter == 4
    assert float(second.policy.state["w"][0]) == 0 + 1 + 2 + 3


def test_finished_run_runs_nothing_and_skips_the_start_hook(tmp_path):
    CountingLoop(tmp_path, num_steps=2).run_loop()
    again = CountingLoop(tmp_path, num_steps=2)
    assert again.run_loop() == 2
    assert again.calls == [("load", {"counter": 2}), ("close",)]
