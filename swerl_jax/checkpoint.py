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
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import grain
import jax
import orbax.checkpoint as ocp

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
        return self._manager.save(step, args=ocp.args.Composite(**items), force=True)

    def latest_step(self) -> int | None:
        """The newest finalized step, or None (waits for a save in flight: it is counted once on disk)."""
        self._manager.wait_until_finished()
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Every finalized step on disk, ascending (waits for a save in flight)."""
        self._manager.wait_until_finished()
        return sorted(self._manager.all_steps())

    def restore(self, step: int, abstract_state: Any, *, data_iterator: Any = None) -> Restored:
        """Restore `step` onto `abstract_state` (see `abstract_like`); `data_iterator`, a fresh iterator of
        the same pipeline, gets the saved position and is returned in `Restored.data_iterator`."""
        self._manager.wait_until_finished()  # a step saved asynchronously a moment ago is restorable
        if step not in self._manager.all_steps():
            raise FileNotFoundError(f"no finalized checkpoint for step {step} in {self.directory} "
                                    f"(have {self.all_steps()})")
        present = set(self._manager.item_metadata(step).keys())
        if data_iterator is not None and DATA not in present:
            raise ValueError(f"checkpoint {self.directory}/{step} has no data-iterator state; "
                             "it was saved without data_iterator")
        items: dict[str, Any] = {STATE: ocp.args.StandardRestore(abstract_state), HOST: ocp.args.JsonRestore()}
        if RNG in present:
            items[RNG] = ocp.args.StandardRestore()
        if data_iterator is not None:
            items[DATA] = grain.checkpoint.CheckpointRestore(data_iterator)
        out = self._manager.restore(step, args=ocp.args.Composite(**items))
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
        """`restore` of the newest finalized step, or None when there is no checkpoint yet."""
        step = self.latest_step()
        if step is None:
            return None
        return self.restore(step, abstract_state, data_iterator=data_iterator)

    def wait_until_finished(self) -> None:
        """Block until a pending async save is finalized on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Finish pending saves and release the manager's threads."""
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
