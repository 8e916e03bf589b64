"""Policy versions on disk: publish (atomic LATEST), load, prune, wait."""

from __future__ import annotations

import json
import threading
import time

import jax
import numpy as np
import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.sampler import weights


@pytest.fixture(scope="module")
def params():
    return init_params(get_model_config("tiny"), jax.random.PRNGKey(0))


def _equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_publish_then_load_exact(tmp_path, params):
    assert weights.latest_version(tmp_path) is None
    weights.publish(tmp_path, params, 1)
    assert weights.latest_version(tmp_path) == 1
    marker = json.loads((tmp_path / "LATEST").read_text())
    assert marker["path"] == "v_1" and marker["published_at"] <= time.time()
    back = weights.load(tmp_path, 1, like=params)
    assert jax.tree.structure(back) == jax.tree.structure(params) and _equal(back, params)


def test_versions_must_increase_and_old_ones_are_pruned(tmp_path, params):
    weights.publish(tmp_path, params, 1)
    weights.publish(tmp_path, params, 2)
    with pytest.raises(ValueError, match="not newer"):
        weights.publish(tmp_path, params, 2)
    weights.publish(tmp_path, params, 5, keep_last=2)  # keeps versions > 3
    assert sorted(p.name for p in tmp_path.glob("v_*")) == ["v_5"]
    with pytest.raises(FileNotFoundError, match="policy version 2"):
        weights.load(tmp_path, 2)


def test_a_version_without_marker_is_invisible(tmp_path, params):
    weights.publish(tmp_path, params, 1)
    (tmp_path / "v_2").mkdir()  # a crashed publisher's partial directory
    watcher = weights.WeightWatcher(tmp_path, like=params)
    assert watcher.poll()[0] == 1 and watcher.poll() is None


def test_corrupt_marker_names_the_file(tmp_path):
    (tmp_path / "LATEST").write_text("{")
    with pytest.raises(ValueError, match="corrupt policy marker .*LATEST"):
        weights.latest_version(tmp_path)


def test_a_training_stage_as_weights_names_the_export_command(tmp_path):
    """New-user check: --weights RUN/sft said "no published policy in it" and nothing of how to get one."""
    (tmp_path / "run" / "sft" / "checkpoints" / "5").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as err:
        weights.require_policy(tmp_path / "run" / "sft")
    assert str(err.value).endswith(f"(it holds training checkpoints: export them first, python -m "
                                   f"swerl_jax.eval.export --run {tmp_path / 'run'} --stage sft --out HF_DIR, and "
                                   "evaluate HF_DIR as the model, e.g. --hf_dir HF_DIR)")


def test_watcher_waits_for_a_version_published_later(tmp_path, params):
    watcher = weights.WeightWatcher(tmp_path, like=params, poll_s=0.01)
    newer = jax.tree.map(lambda x: x + 1, params)
    t = threading.Timer(0.3, weights.publish, (tmp_path, newer, 3))
    t.start()
    version, got = watcher.wait_for(2, timeout_s=30)
    t.join()
    assert version == 3 and _equal(got, newer)
    assert 0 <= watcher.last_ready_latency_s < 30
    with pytest.raises(TimeoutError, match="policy version 4 was not published"):
        watcher.wait_for(4, timeout_s=0.1)


def _data_file(version_dir):
    return max((p for p in version_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def test_corrupt_version_is_refused_and_the_watcher_keeps_its_version(tmp_path, params, caplog):
    from swerl_jax.runs.integrity import CorruptCheckpointError

    weights.publish(tmp_path, params, 1)
    assert (tmp_path / "v_1" / "INTEGRITY.json").is_file()
    watcher = weights.WeightWatcher(tmp_path, like=params)
    assert watcher.poll()[0] == 1
    newer = jax.tree.map(lambda x: x + 1, params)
    weights.publish(tmp_path, newer, 2)
    bad = _data_file(tmp_path / "v_2")
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match=f"corrupt checkpoint file {bad}"):
        weights.load(tmp_path, 2, like=params)
    with caplog.at_level("WARNING", logger="swerl_jax.sampler.weights"):
        assert watcher.poll() is None and watcher.version == 1  # keeps serving version 1
    assert any("refusing policy version 2" in m and str(bad) in m for m in caplog.messages)
    with pytest.raises(TimeoutError, match="refused version 2"):
        watcher.wait_for(2, timeout_s=0.05)
    weights.publish(tmp_path, newer, 3)  # a good newer version is picked up
    version, got = watcher.poll()
    assert version == 3 and _equal(got, newer)
    fresh = weights.WeightWatcher(tmp_path, like=params)  # nothing loaded yet: nothing to keep, so it raises
    with open(_data_file(tmp_path / "v_3"), "r+b") as f:
        f.truncate(3)
    with pytest.raises(CorruptCheckpointError, match="v_3"):
        fresh.poll()


def test_version_without_manifest_loads_with_a_note(tmp_path, params, caplog):
    weights.publish(tmp_path, params, 1)
    (tmp_path / "v_1" / "INTEGRITY.json").unlink()  # published before checksums existed
    with caplog.at_level("INFO", logger="swerl_jax.sampler.weights"):
        assert _equal(weights.load(tmp_path, 1, like=params), params)
    assert any("no integrity manifest" in m for m in caplog.messages)
