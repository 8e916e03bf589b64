"""Checkpointer: sharded round trip, Grain iterator position, RNG, host JSON, retention, crash mid-save."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from experiments.base import get_config
from swerl_jax.runs.checkpoint import Checkpointer, abstract_like
from swerl_jax.runs.integrity import CorruptCheckpointError
from swerl_jax.train_step import TrainState

REPO = pathlib.Path(__file__).resolve().parents[1]


def _dataset():
    return grain.MapDataset.range(50).shuffle(seed=3).map(lambda x: x * 10).to_iter_dataset()


def test_sharded_round_trip_with_iterator_rng_and_host_state(tmp_path):
    mesh = jax.make_mesh((4, 2), ("data", "fsdp"))
    sh = NamedSharding(mesh, P("data", "fsdp"))
    params = {"w": jax.device_put(jnp.arange(64.0).reshape(8, 8), sh), "b": jnp.arange(3.0)}
    tx = optax.adamw(1e-3)
    opt_state = tx.init(params)
    _, opt_state = tx.update(jax.tree.map(jnp.ones_like, params), opt_state, params)
    state = TrainState(step=jnp.int32(7), params=params, opt_state=opt_state)
    it = iter(_dataset())
    seen = [next(it) for _ in range(5)]
    rng = jax.random.key(11)
    with Checkpointer(tmp_path, every_steps=1, async_save=True) as ck:
        assert ck.restore_latest(abstract_like(state)) is None
        assert ck.save(7, state, rng=rng, host_state={"reward": {"scored": 80, "timeouts": 1}, "metrics_step": 7},
                       data_iterator=it)
    expected_next = [next(it) for _ in range(3)]

    # restore onto a *different* layout: the result must come back with the requested shardings
    target_sh = NamedSharding(mesh, P(None, "data"))
    shardings = jax.tree.map(lambda x: NamedSharding(mesh, P()), state)
    shardings = shardings._replace(params={"w": target_sh, "b": NamedSharding(mesh, P())})
    with Checkpointer(tmp_path, every_steps=1) as ck:
        r = ck.restore_latest(abstract_like(state, shardings), data_iterator=iter(_dataset()))
    assert r.step == 7 and isinstance(r.state, TrainState) and int(r.state.step) == 7
    assert r.state.params["w"].sharding == target_sh
    for a, b in zip(jax.tree.leaves(r.state), jax.tree.leaves(state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert r.host_state == {"reward": {"scored": 80, "timeouts": 1}, "metrics_step": 7}
    np.testing.assert_array_equal(jax.random.key_data(r.rng), jax.random.key_data(rng))
    assert jax.random.key_impl(r.rng) == jax.random.key_impl(rng)
    assert [next(r.data_iterator) for _ in range(3)] == expected_next
    fresh = iter(_dataset())
    assert [next(fresh) for _ in range(8)] == seen + expected_next  # the same stream as an uninterrupted run


def test_retention_interval_and_errors(tmp_path):
    with Checkpointer(tmp_path, max_to_keep=2, every_steps=2, async_save=False) as ck:
        saved = [s for s in range(7) if ck.save(s, {"x": jnp.full(2, float(s))}, rng=jax.random.PRNGKey(s))]
        assert saved == [0, 2, 4, 6]
        assert ck.save(7, {"x": jnp.full(2, 7.0)}, force=True)
        assert ck.all_steps() == [6, 7] and ck.latest_step() == 7
        r = ck.restore(6, abstract_like({"x": jnp.zeros(2)}))
        np.testing.assert_array_equal(r.state["x"], [6.0, 6.0])
        np.testing.assert_array_equal(r.rng, jax.random.PRNGKey(6))  # raw uint32 keys stay raw
        assert ck.restore(7, abstract_like({"x": jnp.zeros(2)})).rng is None
        with pytest.raises(FileNotFoundError, match="step 4"):
            ck.restore(4, abstract_like({"x": jnp.zeros(2)}))
        with pytest.raises(ValueError, match="no data-iterator state"):
            ck.restore(7, abstract_like({"x": jnp.zeros(2)}), data_iterator=iter(_dataset()))
    with pytest.raises(ValueError, match="checkpoint.every_steps"):
        Checkpointer(tmp_path, every_steps=0)
    c = get_config()
    c.checkpoint.every_steps = 5
    with Checkpointer.from_config(c, tmp_path / "cfg") as ck:
        assert ck.should_save(10) and not ck.should_save(11) and not ck.save(3, {"x": jnp.zeros(1)})


CHILD = textwrap.dedent("""
    import pathlib, sys, time
    import grain, jax.numpy as jnp
    from swerl_jax.runs.checkpoint import Checkpointer

    class Stuck(grain.DatasetIterator):  # its state capture hangs: the save is mid-way when killed
        def __next__(self):
            return 0
        def get_state(self):
            pathlib.Path(sys.argv[2]).write_text("saving")
            time.sleep(300)
        def set_state(self, state):
            pass

    ck = Checkpointer(sys.argv[1], every_steps=1, async_save=True)
    ck.save(1, {"w": jnp.ones(4)}, host_state={"n": 1})
    ck.wait_until_finished()
    ck.save(2, {"w": jnp.full(4, 2.0)}, host_state={"n": 2}, data_iterator=Stuck())
""")


def test_sigkill_mid_save_leaves_last_complete_step(tmp_path):
    script, marker = tmp_path / "child.py", tmp_path / "marker"
    script.write_text(CHILD)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run"), str(marker)], env=env, cwd=REPO)
    try:
        deadline = time.time() + 120
        while not marker.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert marker.exists(), f"child exited ({proc.poll()}) before reaching the second save"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    ckdir = tmp_path / "run" / "checkpoints"
    assert any(p.name.startswith("2.") and "tmp" in p.name for p in ckdir.iterdir())  # killed mid-save
    with Checkpointer(tmp_path / "run", every_steps=1) as ck:
        assert ck.all_steps() == [1]
        r = ck.restore_latest(abstract_like({"w": jnp.zeros(4)}))
        assert r.step == 1 and r.host_state == {"n": 1}
        np.testing.assert_array_equal(r.state["w"], np.ones(4))
        assert ck.save(2, {"w": jnp.full(4, 3.0)})  # the step can be saved again after the crash
        ck.wait_until_finished()
        assert ck.all_steps() == [1, 2]


def test_async_save_survives_donating_the_saved_buffers(tmp_path):
    """The train step donates its state: an async save in flight must still write the values it was given."""
    state = {f"w{i}": jnp.full((256, 1024), float(i)) for i in range(8)}  # 8 MiB: the write takes a while
    before = jax.device_get(state)
    overwrite = jax.jit(lambda s: jax.tree.map(lambda x: x * 0 - 1.0, s), donate_argnums=0)
    with Checkpointer(tmp_path, every_steps=1, async_save=True) as ck:
        ck.save(1, state)
        state = overwrite(state)  # reuses the buffers right away
        state = overwrite(state)
        ck.wait_until_finished()
        got = ck.restore_latest(abstract_like(state)).state
    for k, v in before.items():
        np.testing.assert_array_equal(np.asarray(got[k]), v)


def test_rl_loader_position_round_trip(tmp_path):
    """The project's RL Grain pipeline resumes at the same batch through the checkpoint."""
    from swerl_jax.data import loader  # a project module: an import error fails the test, never skips it
    c = get_config()
    c.data.synthetic_num_records = 16
    c.data.max_prompt_len = 2048
    it = iter(loader.rl_dataset_from_config(c, batch_size=2))
    next(it), next(it)
    with Checkpointer(tmp_path, every_steps=1) as ck:
        ck.save(2, {"x": jnp.zeros(1)}, data_iterator=it)
        want = next(it)
        r = ck.restore_latest(abstract_like({"x": jnp.zeros(1)}),
                              data_iterator=iter(loader.rl_dataset_from_config(c, batch_size=2)))
    got = next(r.data_iterator)
    assert list(got["instance_id"]) == list(want["instance_id"])
    assert len(got["prompt_ids"]) == len(want["prompt_ids"]) == 2
    for g, w in zip(got["prompt_ids"], want["prompt_ids"], strict=True):
        np.testing.assert_array_equal(g, w)


def _three_steps(root) -> None:
    with Checkpointer(root, max_to_keep=3, every_steps=1, async_save=True) as ck:
        for s in (1, 2, 3):
            ck.save(s, {"w": jnp.arange(4096.0) + s}, host_state={"n": s})


def _biggest_file(step_dir: pathlib.Path) -> pathlib.Path:
    """The step's largest array data file (Orbax's OCDBT data under state/)."""
    return max((p for p in (step_dir / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _flip_byte(path: pathlib.Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _truncate(path: pathlib.Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


@pytest.mark.parametrize("damage", [_flip_byte, _truncate])
def test_corrupt_newest_step_falls_back_with_a_warning_naming_the_file(tmp_path, caplog, damage):
    _three_steps(tmp_path)
    ckdir = tmp_path / "checkpoints"
    assert all((ckdir / str(s) / "INTEGRITY.json").is_file() for s in (1, 2, 3))
    bad = _biggest_file(ckdir / "3")
    damage(bad)
    with caplog.at_level("WARNING", logger="swerl_jax.runs.checkpoint"), Checkpointer(tmp_path, every_steps=1) as ck:
        r = ck.restore_latest(abstract_like({"w": jnp.zeros(4096)}))
        assert r.step == 2 and r.host_state == {"n": 2}
        np.testing.assert_array_equal(r.state["w"], np.arange(4096.0) + 2)
        assert ck.all_steps() == [1, 2]  # the corrupt step is moved aside, not deleted
        assert ck.save(3, {"w": jnp.full(4096, 9.0)}, force=True)  # and can be saved again
        ck.wait_until_finished()
        np.testing.assert_array_equal(ck.restore_latest(abstract_like({"w": jnp.zeros(4096)})).state["w"],
                                      np.full(4096, 9.0))
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "step 3 is corrupt" in warnings and str(bad) in warnings
    assert [p.name.split("-")[:2] for p in ckdir.iterdir() if p.name.startswith("corrupt-")] == [["corrupt", "3"]]


def test_every_step_corrupt_is_a_clear_error_naming_the_files(tmp_path):
    _three_steps(tmp_path)
    bad = [_biggest_file(tmp_path / "checkpoints" / str(s)) for s in (1, 2, 3)]
    for path in bad:
        _flip_byte(path)
    with Checkpointer(tmp_path, every_steps=1) as ck:
        with pytest.raises(CorruptCheckpointError, match="no intact checkpoint is left") as e:
            ck.restore_latest(abstract_like({"w": jnp.zeros(4096)}))
        with pytest.raises(FileNotFoundError, match="step 2"):  # explicit restore of a quarantined step
            ck.restore(2, abstract_like({"w": jnp.zeros(4096)}))
    for path in bad:
        assert str(path) in str(e.value)


def test_explicit_restore_of_a_corrupt_step_raises_naming_the_file(tmp_path):
    _three_steps(tmp_path)
    bad = tmp_path / "checkpoints" / "2" / "host" / "metadata"
    assert bad.is_file()
    bad.write_text('{"n": 7}')  # same kind of content, different bytes
    with Checkpointer(tmp_path, every_steps=1) as ck:
        with pytest.raises(CorruptCheckpointError, match=f"corrupt checkpoint file {bad}"):
            ck.restore(2, abstract_like({"w": jnp.zeros(4096)}))
        assert ck.all_steps() == [1, 2, 3]  # an explicit restore moves nothing


def test_step_without_manifest_restores_unverified_with_a_note(tmp_path, caplog):
    """Checkpoints from before the manifest, and a crash before (or while) writing it, restore with a note;
    a half-written temp manifest never counts as a manifest."""
    _three_steps(tmp_path)
    step3 = tmp_path / "checkpoints" / "3"
    manifest = step3 / "INTEGRITY.json"
    (step3 / ".INTEGRITY.json.tmp123").write_text(manifest.read_text()[:40])  # killed mid-write
    manifest.unlink()
    with caplog.at_level("INFO", logger="swerl_jax.runs.checkpoint"), Checkpointer(tmp_path, every_steps=1) as ck:
        r = ck.restore_latest(abstract_like({"w": jnp.zeros(4096)}))
    assert r.step == 3
    np.testing.assert_array_equal(r.state["w"], np.arange(4096.0) + 3)
    assert any("no integrity manifest" in m and str(step3) in m for m in caplog.messages)


def test_failed_manifest_write_leaves_an_unverified_step_not_a_dead_run(tmp_path, caplog, monkeypatch):
    import swerl_jax.runs.checkpoint as checkpoint

    def disk_full(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "write_manifest", disk_full)
    with caplog.at_level("WARNING", logger="swerl_jax.runs.checkpoint"), Checkpointer(tmp_path, every_steps=1) as ck:
        ck.save(1, {"w": jnp.ones(8)})
        ck.wait_until_finished()
        assert not (tmp_path / "checkpoints" / "1" / "INTEGRITY.json").exists()
        np.testing.assert_array_equal(ck.restore_latest(abstract_like({"w": jnp.zeros(8)})).state["w"], np.ones(8))
    assert any("could not write the integrity manifest" in m and "No space left" in m for m in caplog.messages)
