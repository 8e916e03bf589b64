"""The loop both trainers share: resume from the newest checkpoint, run steps, write metrics, checkpoint each step.

    class SFTTrainer(TrainLoop):
        stage = "sft"
        def train_step(self, step): ...    # -> (metrics, rollouts)

    start = trainer.run_loop()             # steps start + 1 .. num_steps; returns start (0 when fresh)

A subclass sets `policy`, `data_iter`, `checkpointer`, `workdir`, `num_steps`, `config` and `is_main` in its
constructor, and may override the hooks: `host_state` / `load_host_state` (JSON state checkpointed beside the
params, e.g. the reward service's counters), `before_steps` (e.g. start the sampler on the restored params) and
`close`. The order of one step is the contract every run relies on: metrics (every `logging.every_steps` and at
the last step), rollouts, then the checkpoint (forced at the last step), so a crash after step s's checkpoint
never repeats s, and a crash before it repeats s from the same data iterator state.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any

from swerl_jax.runs.checkpoint import Checkpointer
from swerl_jax.runs.metrics import MetricsWriter

log = logging.getLogger("swerl_jax.runs.loop")


class TrainLoop:
    """Resume / step / log / checkpoint skeleton; subclasses implement `train_step`."""

    stage: str = ""  # "sft" | "grpo": the progress bar's label and the log lines' name
    save_rollouts: bool = False  # write each step's rollouts (GRPO, when logging.save_rollouts)

    config: Any
    workdir: pathlib.Path
    num_steps: int
    policy: Any
    data_iter: Any
    checkpointer: Checkpointer
    is_main: bool
    metrics_writer: MetricsWriter | None = None
    step_in_flight: int = 0  # the step `train_step` is running (progress lines name it)

    def train_step(self, step: int) -> tuple[dict, list]:
        """Run step `step` (1-based); return (metrics, rollouts to write, [] when none)."""
        raise NotImplementedError

    def host_state(self) -> dict:
        """JSON-serialisable state checkpointed with each step (restored by `load_host_state`)."""
        return {}

    def load_host_state(self, state: dict) -> None:
        """Restore what `host_state` returned at the checkpoint being resumed."""

    def report(self, text: str) -> None:
        """Show what the step in flight is doing beside the progress bar (`MetricsWriter.activity`); a no-op
        without a bar."""
        if self.metrics_writer is not None:
            self.metrics_writer.activity(text)

    def before_steps(self, start: int) -> None:
        """Called once before the first step that will run (`start` steps are done); not called when none will."""

    def close(self) -> None:
        """Release what the trainer holds; the base finishes pending checkpoint writes."""
        self.checkpointer.close()

    def restore(self) -> int:
        """Load the newest checkpoint (state, data iterator, host state) if there is one; return its step (0)."""
        restored = self.checkpointer.restore_latest(self.policy.abstract_state(), data_iterator=self.data_iter)
        if restored is None:
            return 0
        self.policy.state, self.data_iter = restored.state, restored.data_iterator
        self.load_host_state(restored.host_state or {})
        log.info("resumed %s from %s step %d", self.stage, self.checkpointer.directory, restored.step)
        return restored.step

    def run_loop(self) -> int:
        """Train from the newest checkpoint (or from scratch) to `num_steps`; return the step resumed from."""
        start = self.restore()
        lg = self.config.logging
        writer = self.metrics_writer = MetricsWriter(
            self.workdir, self.is_main, total_steps=self.num_steps, resume_step=start if start else None,
            tensorboard=bool(lg.tensorboard), progress=bool(lg.progress_bar), save_rollouts=self.save_rollouts,
            desc=self.stage)
        try:
            if start < self.num_steps:
                self.before_steps(start)
            for step in range(start + 1, self.num_steps + 1):
                self.step_in_flight = step
                metrics, rollouts = self.train_step(step)
                self.report("")
                if step % int(lg.every_steps) == 0 or step == self.num_steps:
                    writer.write(step, metrics)
                if rollouts:
                    writer.write_rollouts(step, rollouts)
                self.checkpointer.save(step, self.policy.state, data_iterator=self.data_iter,
                                       host_state=self.host_state() or None, force=step == self.num_steps)
        finally:
            writer.close()
            self.close()
        return start
