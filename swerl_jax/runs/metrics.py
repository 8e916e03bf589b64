"""Per-step metrics: a JSONL file, TensorBoard scalars, a progress bar with ETA, and per-step rollout files.

    writer = MetricsWriter(workdir, is_main=jax.process_index() == 0, total_steps=config.rl.num_steps,
                           resume_step=restored.step if restored else None)
    writer.write(step, {"reward_mean": ..., "format_error": {"no_solution": 0.1}})  # nested dicts -> "a/b"
    writer.write_rollouts(step, rollouts)   # workdir/rollouts/step_000012.jsonl
    writer.close()

Resume safety: the trainer writes step s's metrics *before* it saves checkpoint s. On restore from step s,
`resume_step=s` drops every metrics.jsonl line after step s (and a torn last line) and deletes rollout files of
later steps. TensorBoard's event files are a view of metrics.jsonl: on every open they are rewritten from the
kept lines, so a kill that lost unflushed events (TensorBoard buffers ~30 s) or left events past the checkpoint
cannot show missing or doubled steps; a resumed run's files equal those of an uninterrupted run. Only the
main process (`is_main`) writes anything.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

METRICS_FILE = "metrics.jsonl"
ROLLOUTS_DIR = "rollouts"
TENSORBOARD_DIR = "tensorboard"
PROGRESS_KEYS = ("reward_mean", "loss", "kl")  # shown beside the progress bar when present


def to_scalar(value: Any, name: str = "value") -> float | int | bool:
    """A Python number from a Python/NumPy/JAX scalar (size-1 arrays included); TypeError names `name`."""
    if isinstance(value, bool | int | float):
        return value
    arr = np.asarray(value)  # pulls JAX arrays to the host
    if arr.size != 1:
        raise TypeError(f"metric {name!r} is not a scalar: shape {arr.shape}")
    return arr.reshape(()).item()


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float | int | bool]:
    """{"a": {"b": 1}} -> {"a/b": 1}, every leaf converted with `to_scalar`."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_metrics(value, name + "/"))
        else:
            out[name] = to_scalar(value, name)
    return out


def device_memory_metrics(prefix: str = "memory/trainer_") -> dict[str, float]:
    """This process's accelerator memory from its runtime's allocator, the largest over its local devices: bytes in
    use now and at the peak so far, in GiB ({} where the backend keeps no statistics, e.g. XLA's CPU client)."""
    import jax

    stats = [d.memory_stats() for d in jax.local_devices()]
    stats = [s for s in stats if s and "peak_bytes_in_use" in s]
    if not stats:
        return {}
    return {f"{prefix}peak_gib": max(s["peak_bytes_in_use"] for s in stats) / 2**30,
            f"{prefix}in_use_gib": max(s.get("bytes_in_use", 0) for s in stats) / 2**30}


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The complete lines of a metrics.jsonl (a torn last line from a crash is skipped)."""
    rows = []
    p = pathlib.Path(path)
    if not p.exists():
        return rows
    for line in p.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def rollout_path(workdir: str | os.PathLike, step: int) -> pathlib.Path:
    """workdir/rollouts/step_XXXXXX.jsonl."""
    return pathlib.Path(workdir) / ROLLOUTS_DIR / f"step_{step:06d}.jsonl"


def _atomic_write(path: pathlib.Path, text: str) -> None:
    # write-then-rename: readers (notebooks, a resumed run) never see half a file
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def truncate_metrics(path: str | os.PathLike, last_step: int) -> int:
    """Rewrite metrics.jsonl keeping only complete lines with step <= last_step; returns lines kept."""
    p = pathlib.Path(path)
    if not p.exists():
        return 0
    kept = [r for r in read_metrics(p) if int(r.get("step", -1)) <= last_step]
    _atomic_write(p, "".join(json.dumps(r) + "\n" for r in kept))
    return len(kept)


class MetricsWriter:
    """Writes each step's scalars to metrics.jsonl and TensorBoard, draws a progress bar, saves rollouts."""

    def __init__(self, workdir: str | os.PathLike, is_main: bool = True, *, total_steps: int | None = None,
                 resume_step: int | None = None, tensorboard: bool = True, progress: bool = True,
                 save_rollouts: bool = True, progress_file: Any = None, desc: str = "train"):
        """Open workdir's metrics for appending after cutting away everything past `resume_step` (the restored
        checkpoint's step; None: a fresh start, which replaces whatever an earlier attempt left). `desc` labels
        the progress bar (the stage: "sft", "grpo")."""
        self.workdir = pathlib.Path(workdir)
        self.is_main = is_main
        self.save_rollouts = save_rollouts
        self.metrics_path = self.workdir / METRICS_FILE
        self.tensorboard_dir = self.workdir / TENSORBOARD_DIR
        self._file = self._tb = self._bar = None
        if not is_main:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A run that restores no checkpoint starts from step 0: anything an earlier, aborted attempt wrote here
        # is cut away too (resume_step -1), so the files always describe one uninterrupted run.
        last = -1 if resume_step is None else int(resume_step)
        kept = truncate_metrics(self.metrics_path, last)
        self._drop_rollouts_after(last)
        self._file = open(self.metrics_path, "a")
        if tensorboard:
            self._tb = self._rebuild_tensorboard(read_metrics(self.metrics_path))
        if progress:
            from tqdm import tqdm

            # the bar counts logged steps, whatever the trainer's step numbering
            self._bar = tqdm(total=total_steps, initial=kept, desc=desc, unit="step", dynamic_ncols=True,
                             file=progress_file or sys.stderr, smoothing=0.1)
            self._desc = desc
            # on a terminal the bar is redrawn every second, so its elapsed time moves in a long step (a log file
            # gets a line per stage instead of one per second)
            self._stop = threading.Event()
            self._ticker = threading.Thread(target=self._tick, name="metrics-bar", daemon=True)
            if _is_tty(self._bar.fp):
                self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            bar = self._bar
            if bar is not None:
                bar.refresh()

    def activity(self, text: str) -> None:
        """What the step in flight is doing, shown live beside the bar's label (`grpo | step 3: generating ...`;
        issue 57 item 7: a 6-minute first step showed `0/2` and nothing else). "" clears it."""
        if self._bar is not None:
            self._bar.set_description_str(f"{self._desc} | {text}" if text else self._desc, refresh=True)

    def _rebuild_tensorboard(self, rows: list[dict]) -> Any:
        """A fresh event file holding exactly `rows` (the kept metrics.jsonl lines); older event files go.

        Replaying is cheap (a 1,600-step run is ~10^5 scalars, a few seconds) and, unlike TensorBoard's purge
        events, leaves nothing for a reader to reconcile."""
        from tensorboardX import SummaryWriter  # imported lazily: tests and tools that only read skip it

        if self.tensorboard_dir.is_dir():
            for f in self.tensorboard_dir.glob("events.out.tfevents.*"):
                f.unlink()
        # the suffix keeps a restart within the same second from reusing the previous file's name
        tb = SummaryWriter(str(self.tensorboard_dir), flush_secs=30, filename_suffix=f".{time.time_ns()}")
        for row in rows:
            self._add_scalars(tb, row)
        tb.flush()
        return tb

    @staticmethod
    def _add_scalars(tb: Any, row: Mapping[str, Any]) -> None:
        for name, value in row.items():
            if name != "step" and isinstance(value, bool | int | float):
                tb.add_scalar(name, float(value), global_step=int(row["step"]))

    def _drop_rollouts_after(self, step: int) -> None:
        folder = self.workdir / ROLLOUTS_DIR
        if not folder.is_dir():
            return
        for f in folder.glob("step_*.jsonl"):
            try:
                s = int(f.stem.split("_", 1)[1])
            except ValueError:
                continue
            if s > step:
                f.unlink()

    def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Log one step: a JSON line {"step", **flattened metrics}, TensorBoard scalars, a progress tick.

        Non-finite values are kept (JSON NaN/Infinity, which Python's json reads back). Returns the row.
        """
        row = {"step": int(step), **flatten_metrics(metrics)}
        if not self.is_main:
            return row
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()  # one line per step; a crash loses at most the line being written
        if self._tb is not None:
            self._add_scalars(self._tb, row)
        if self._bar is not None:
            shown = {k: f"{row[k]:.4g}" for k in PROGRESS_KEYS if k in row and isinstance(row[k], float | int)}
            failed = row.get("reward_failure_rate")
            if isinstance(failed, float | int) and failed > 0:  # a failing reward is not a low reward
                shown["reward_failure_rate"] = f"{failed:.0%}"
            self._bar.set_postfix(shown, refresh=False)
            self._bar.update(1)
        return row

    def write_rollouts(self, step: int, rollouts: Iterable[Any]) -> pathlib.Path | None:
        """Save one step's rollouts as JSONL (atomically). Each item is a dict, or has `to_json(step)`.

        Rows must carry prompt_id, completion, reward and advantage; group, sample and reward_info are what the
        notebooks also read (`swerl_jax.rl.rollouts.Rollout.to_json` writes them all); "step" is added.
        """
        if not (self.is_main and self.save_rollouts):
            return None
        rows = [r.to_json(step) if hasattr(r, "to_json") else {"step": int(step), **r} for r in rollouts]
        for i, r in enumerate(rows):
            missing = [k for k in ("prompt_id", "completion", "reward", "advantage") if k not in r]
            if missing:
                raise ValueError(f"rollout {i} of step {step} lacks {missing}")
        path = rollout_path(self.workdir, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, "".join(json.dumps(r, default=_json_default) + "\n" for r in rows))
        return path

    def flush(self) -> None:
        """Push buffered TensorBoard events to disk (metrics.jsonl is flushed on every write)."""
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        """Flush and close the files and the progress bar."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._bar is not None:
            self._stop.set()
            if self._ticker.is_alive():
                self._ticker.join()
            self._bar.close()
            self._bar = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_tty(stream: Any) -> bool:
    """Whether `stream` (or the stream tqdm wraps) is a terminal."""
    stream = getattr(stream, "stream", stream)
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _json_default(value: Any) -> Any:
    # numpy/JAX scalars and arrays inside reward_info
    arr = np.asarray(value)
    if arr.dtype == object:
        return str(value)
    return arr.item() if arr.size == 1 and arr.ndim == 0 else arr.tolist()

