"""Two JAX processes re-publish a resumed run's policy (issue 57 item 3): `weights.reset` then `weights.publish`, the
trainer's sequence when its sampler starts, must work whichever process gets there first.

The worker half (`python -m tests.sampler.test_weights_multiprocess OUT_DIR`) runs under launch/multiprocess_cpu.sh
as 2 processes x 1 CPU device. Process 0 is made the slow one, deterministically: it resets only once process 1 has
either read the policy marker or is waiting for process 0 (events through a file, no sleeps). Before the fix process
1 read the previous run's version 3 and refused to publish version 2 ("is not newer than the published version 3").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 120.0  # how long process 0 waits for process 1's event before giving up (a hung test, not a timing)


def worker(out_dir: str) -> None:
    """Publish version 3 (the run before the kill), then reset and publish version 2 (the resume from checkpoint
    2) in both processes; each writes result_<process>.json."""
    from swerl_jax import sharding

    sharding.initialize_distributed()  # JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from swerl_jax.sampler import weights

    out = Path(out_dir)
    policy, progress, me = out / "policy", out / "process_1_progress", jax.process_index()
    full = np.arange(32, dtype=np.float32).reshape(8, 4)
    spec = NamedSharding(Mesh(np.array(jax.devices()), ("x",)), PartitionSpec("x"))  # half the rows per process
    params = {"w": jax.make_array_from_callback(full.shape, spec, lambda index: full[index])}
    weights.publish(policy, params, 3)  # the run before the kill
    multihost_utils.sync_global_devices("previous run published")  # every process now reads LATEST = 3
    if me == 1:  # tell process 0 once this process has read the marker, or waits for process 0 to go on
        read_marker, sync = weights.read_marker, multihost_utils.sync_global_devices

        def read_then_tell(directory):
            marker = read_marker(directory)
            progress.touch()
            return marker

        def tell_then_sync(name):
            progress.touch()
            return sync(name)

        weights.read_marker, multihost_utils.sync_global_devices = read_then_tell, tell_then_sync
    else:  # the slow process 0: it resets only after process 1's event
        deadline = time.monotonic() + WAIT_S
        while not progress.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    try:
        weights.reset(policy)
        weights.publish(policy, params, 2)
        multihost_utils.sync_global_devices("resumed run published")  # process 0 has written LATEST
        back = multihost_utils.process_allgather(weights.load(policy, 2, like=params)["w"], tiled=True)
        result: dict = {"latest": weights.latest_version(policy), "restored_ok": bool(np.array_equal(back, full))}
    except Exception as e:  # noqa: BLE001 - the test reads the error
        result = {"error": f"{type(e).__name__}: {e}"}
    (out / f"result_{me}.json").write_text(json.dumps(result))
    if "error" in result:  # exit now: jax.distributed's shutdown barrier would wait minutes for the other process
        sys.stdout.flush()
        os._exit(1)


@pytest.mark.slow
def test_reset_then_publish_on_two_processes_whoever_comes_first(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["LOG_DIR"] = str(tmp_path / "logs")
    proc = subprocess.run(["bash", "launch/multiprocess_cpu.sh", "2", "1", sys.executable, "-m",
                           "tests.sampler.test_weights_multiprocess", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
    results = [json.loads(p.read_text()) if p.exists() else None
               for p in (tmp_path / "result_0.json", tmp_path / "result_1.json")]
    assert proc.returncode == 0, (results, proc.stdout[-3000:] + proc.stderr[-3000:])
    # version 2 is whole in both processes: nothing was removed under a writer
    assert results == [{"latest": 2, "restored_ok": True}] * 2
    assert sorted(p.name for p in (tmp_path / "policy").glob("v_*")) == ["v_2"]


if __name__ == "__main__":
    worker(sys.argv[1])
