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
