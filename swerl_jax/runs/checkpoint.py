"""Training checkpoints with Orbax: train state, RNG key, host state (JSON) and the Grain iterator, per step.

    ckpt = Checkpointer(workdir, max_to_keep=3, every_steps=50, async_save=True)
    ckpt.save(step, state, rng=rng, host_state={"reward": counters, "metrics_step": step}, data_iterator=it)
    restored = ckpt.restore_latest(abstract_state, data_iterator=fresh_iterator)  # None when there is none

Layout: `workdir/checkpoints/<step>/{state,rng,host,data}` (Orbax composite items). `state` is any pytree
(e.g. `train_step.TrainState`: step, params, optimizer state); it restores onto the shapes, dtypes and
shardings of `abstract_state` (`jax.ShapeDtypeStruct`s with `.sharding`, see `abstract_like`), so a sharded
state comes back sharded, each process reading only its shards. `data` is written by Grain's Orbax handler
(one JSON file per process). Saves are atomic: Orbax writes into a temporary directory and renames it when
every item is finalized, so a crash mid-save leaves no step behind (and `cleanup_tmp_directories` removes the
debris on the next start). Policy snapshots for the sampler are `swerl_jax.sampler.weights`, not this module.

Integrity (`swerl_jax.runs.integrity`): once a step is finalized, process 0 checksums every file of it on a background
thread and writes `<step>/INTEGRITY.json` atomically. Every restore verifies the step first; `restore_latest`
falls back from a corrupt step to the previous one with a warning naming the bad file (the corrupt step is
moved aside to `corrupt-<step>-<time>` so the run can save that step again) and raises `CorruptCheckpointError`
naming the files when no step is left. A step without a manifest (saved before checksums existed, or the
process died before the manifest was written) restores unverified, with a logged note.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import time
from typing import Any, NamedTuple

import grain
import jax
import orbax.checkpoint as ocp

from swerl_jax.runs.integrity import CorruptCheckpointError, has_manifest, verify_manifest, write_manifest

log = logging.getLogger(__name__)
STATE, RNG, HOST, DATA = "state", "rng", "host", "data"


class Restored(NamedTuple):
    """What `restore`/`restore_latest` return; missing items are None."""

    step: int
    state: Any
    rng: jax.Array | None
    host_state: dict | None
    data_iterator: Any


def abstract_like(tree: Any, shardings: Any | None = None) -> Any:
    """ShapeDtypeStructs of `tree` (arrays or ShapeDtypeStructs) carrying `shardings` (a matching tree of
    `jax.sharding.Sharding`), or each leaf's own sharding when None: the target `restore` lays data onto."""
    if shardings is None:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
                            tree)
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def _key_parts(rng: jax.Array) -> tuple[jax.Array, str | None]:
    # Typed keys (jax.random.key) are stored as their raw uint32 data plus the implementation's name.
    if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(rng), str(jax.random.key_impl(rng))
    return rng, None


class Checkpointer:
    """An Orbax `CheckpointManager` over the training state, RNG, host JSON and the Grain iterator."""

    def __init__(self, workdir: str | os.PathLike, max_to_keep: int = 3, every_steps: int = 50,
                 async_save: bool = True, subdir: str = "checkpoints"):
        """Checkpoints go to `workdir/subdir`; `every_steps` drives `should_save` and `save(force=False)`."""
        if every_steps < 1:
            raise ValueError(f"checkpoint.every_steps must be >= 1, got {every_steps}")
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"checkpoint.max_to_keep must be >= 1 (or None: keep all), got {max_to_keep}")
        self.every_steps = int(every_steps)
        self.directory = os.path.abspath(os.path.join(os.fspath(workdir), subdir))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, enable_async_checkpointing=async_save,
            create=True, cleanup_tmp_directories=True)
        self._manager = ocp.CheckpointManager(
            self.directory, options=options,
            item_handlers={STATE: ocp.StandardCheckpointHandler(), RNG: ocp.StandardCheckpointHandler(),
                           HOST: ocp.JsonCheckpointHandler(), DATA: grain.checkpoint.CheckpointHandler()})
        self._async = bool(async_save)
        self._unsealed: list[int] = []  # saved steps whose manifest is not written yet
        # One thread checksums finalized steps so the training loop does not wait for the extra read.
        self._sealer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ckpt-manifest")
        self._sealing: list[concurrent.futures.Future] = []

    @classmethod
    def from_config(cls, config: Any, workdir: str | os.PathLike) -> Checkpointer:
        """From the `checkpoint` section (every_steps, max_to_keep, async_save) of a root config."""
        c = config.checkpoint
        return cls(workdir, max_to_keep=int(c.max_to_keep), every_steps=int(c.every_steps),
                   async_save=bool(c.async_save))

    def should_save(self, step: int) -> bool:
        """Whether `save(step)` (without force) would write: step is a multiple of every_steps and newer than
        the latest saved step (a plain modulo rule, so a resumed run saves at the same steps as an uninterrupted one).
        """
        latest = self._manager.latest_step()
        return step % self.every_steps == 0 and (latest is None or step > latest)

    def save(self, step: int, state: Any, *, rng: jax.Array | None = None, host_state: dict | None = None,
             data_iterator: Any = None, force: bool = False) -> bool:
        """Save step `step` if `should_save(step)` or `force`; returns whether a save started.

        With async_save the call returns once device arrays are copied to host memory (the iterator state
        and host JSON are captured synchronously); the write finishes in the background
        (`wait_until_finished`). `host_state` must be JSON-serialisable (counters, cursors).
        """
        if not (force or self.should_save(step)):
            return False
        items: dict[str, Any] = {STATE: ocp.args.StandardSave(state)}
        host = dict(host_state or {})
        if rng is not None:
            data, impl = _key_parts(rng)
            items[RNG] = ocp.args.StandardSave({"key": data})
            host["_rng_impl"] = impl
        items[HOST] = ocp.args.JsonSave(host)
        if data_iterator is not None:
            items[DATA] = grain.checkpoint.CheckpointSave(data_iterator)
        self._manager.wait_until_finished()  # Orbax waits for the previous save here anyway
        self._seal_finalized()
        started = self._manager.save(step, args=ocp.args.Composite(**items), force=True)
        if started:
            self._unsealed.append(step)
            if not self._async:
                self._seal_finalized()
        return started

    def _seal_finalized(self) -> None:
        """Queue the manifest of every step saved and finalized since the last call (the manager is idle)."""
        steps, self._unsealed = self._unsealed, []
        if jax.process_index() != 0:  # every process wrote its shards before finalization; one checksums them
            return
        self._sealing = [f for f in self._sealing if not f.done() or f.exception() is not None]
        for step in steps:
            self._sealing.append(self._sealer.submit(self._seal, step))

    def _seal(self, step: int) -> None:
        path = self.step_dir(step)
        try:
            write_manifest(path)
        except OSError as e:
            # Retention (max_to_keep) may delete the step while it is hashed; a full disk must not kill the run.
            # Either way the step has no manifest, so it can only restore as unverified, never as verified.
            if os.path.exists(path):
                log.warning("could not write the integrity manifest of %s (it will restore unverified): %s", path, e)

    def _join_sealing(self) -> None:
        sealing, self._sealing = self._sealing, []
        for f in sealing:
            f.result()

    def step_dir(self, step: int) -> str:
        """The directory of finalized step `step`."""
        return os.path.join(self.directory, str(step))

    def latest_step(self) -> int | None:
        """The newest finalized step, or None (waits for a save in flight: it is counted once on disk)."""
        self.wait_until_finished()
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Every finalized step on disk, ascending (waits for a save in flight)."""
        self.wait_until_finished()
        return sorted(self._manager.all_steps())

    def restore(self, step: int, abstract_state: Any, *, data_iterator: Any = None) -> Restored:
        """Restore `step` onto `abstract_state` (see `abstract_like`); `data_iterator`, a fresh iterator of
        the same pipeline, gets the saved position and is returned in `Restored.data_iterator`.

        Raises:
          CorruptCheckpointError: a file of the step does not match its manifest (nothing is restored).
        """
        self.wait_until_finished()  # a step saved asynchronously a moment ago is restorable and sealed
        if step not in self._manager.all_steps():
            raise FileNotFoundError(f"no finalized checkpoint for step {step} in {self.directory} "
                                    f"(have {self.all_steps()})")
        if has_manifest(self.step_dir(step)):
            verify_manifest(self.step_dir(step))
        else:
            log.info("checkpoint %s has no integrity manifest (saved before checksums, or the run stopped before "
                     "writing it): restoring it unverified", self.step_dir(step))
        present = set(self._manager.item_metadata(step).keys())
        if data_iterator is not None and DATA not in present:
            raise ValueError(f"checkpoint {self.directory}/{step} has no data-iterator state; "
                             "it was saved without data_iterator")
        items: dict[str, Any] = {STATE: ocp.args.StandardRestore(abstract_state), HOST: ocp.args.JsonRestore()}
        if RNG in present:
            items[RNG] = ocp.args.StandardRestore()
        if data_iterator is not None:
            items[DATA] = grain.checkpoint.CheckpointRestore(data_iterator)
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(**items))
        except Exception as e:
            e.add_note(f"while restoring checkpoint {self.step_dir(step)}")
            raise
        host = dict(out[HOST] or {})
        impl = host.pop("_rng_impl", None)
        rng = None
        if RNG in present:
            rng = jax.numpy.asarray(out[RNG]["key"])
            if impl is not None:
                rng = jax.random.wrap_key_data(rng, impl=impl)
        return Restored(step=step, state=out[STATE], rng=rng, host_state=host,
                        data_iterator=out[DATA] if data_iterator is not None else None)

    def restore_latest(self, abstract_state: Any, *, data_iterator: Any = None) -> Restored | None:
        """`restore` of the newest finalized step that verifies, or None when there is no checkpoint yet.

        A corrupt step is logged (naming the file), moved aside and skipped for the previous one.

        Raises:
          CorruptCheckpointError: every step is corrupt; the message names each step's bad file.
        """
        steps = self.all_steps()
        if not steps:
            return None
        failures = []
        for step in reversed(steps):
            try:
                return self.restore(step, abstract_state, data_iterator=data_iterator)
            except CorruptCheckpointError as e:
                failures.append(e)
                log.warning("checkpoint step %d is corrupt, falling back to the previous step: %s", step, e)
                self._quarantine(step)
        raise CorruptCheckpointError(failures[0].path, "no intact checkpoint is left in " + self.directory + "; " +
                                     "; ".join(str(e) for e in failures))

    def _quarantine(self, step: int) -> None:
        """Move a corrupt step out of Orbax's view (kept for inspection) so the step can be saved again.

        Multi-host: every process sees the same bytes, so all find the step corrupt; the barriers keep process 0
        from moving it while another is still verifying it.
        """
        if jax.process_count() > 1:
            ocp.multihost.sync_global_processes(f"swerl_corrupt_step_{step}_found")
        if jax.process_index() == 0:
            dest = os.path.join(self.directory, f"corrupt-{step}-{int(time.time())}")
            os.replace(self.step_dir(step), dest)
            log.warning("moved corrupt checkpoint %s to %s", self.step_dir(step), dest)
        if jax.process_count() > 1:
            ocp.multihost.sync_global_processes(f"swerl_corrupt_step_{step}_moved")
        self._manager.reload()

    def wait_until_finished(self) -> None:
        """Block until a pending async save is finalized on disk and its manifest written."""
        self._manager.wait_until_finished()
        self._seal_finalized()
        self._join_sealing()

    def close(self) -> None:
        """Finish pending saves (and their manifests) and release the manager's threads."""
        try:
            self.wait_until_finished()
        finally:
            self._sealer.shutdown()
            self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
