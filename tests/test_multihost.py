"""2 processes x 2 CPU devices (jax.distributed over loopback, gloo collectives) train like 1 process x 4.

The worker half of this file runs as `python -m tests.test_multihost OUT.json [dcn]` under
launch/multiprocess_cpu.sh; the test half launches it both ways and compares the losses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STEPS = 3


def worker(out: str, dcn: bool) -> None:
    """Train STEPS Adam steps of the tiny model over a (data=1, fsdp=2, tensor=2) mesh; process 0 writes losses."""
    from swerl_jax import sharding

    sharding.initialize_distributed()  # reads JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID

    import jax
    import ml_collections
    import numpy as np
    import optax
    from jax.experimental import multihost_utils

    from swerl_jax.model.llama import init_params
    from swerl_jax.train_step import init_train_state, make_train_step, state_shardings
    from tests.test_train_step import BATCH, MODEL, lm_loss, make_batch

    c = ml_collections.ConfigDict()
    # Multi-process: fsdp spans the two processes over "DCN", tensor stays inside each process.
    ici = {"data": 1, "fsdp": 1 if dcn else 2, "tensor": 2}
    c.mesh = ml_collections.ConfigDict({"name": "cpu", "shape": ici, "logical_axis_rules": (),
                                        "dcn_shape": {"data": 1, "fsdp": 2 if dcn else 1, "tensor": 1}})
    sharding.validate_mesh(c, MODEL, jax.device_count(), global_batch=BATCH)
    mesh = sharding.create_mesh(c)
    rules = sharding.logical_axis_rules(c)
    opt = optax.adamw(1e-2)
    p_shard = sharding.param_shardings(MODEL, mesh, rules)
    params = sharding.init_params_sharded(MODEL, mesh, jax.random.key(0), rules)
    first = multihost_utils.process_allgather(params["embed_tokens"], tiled=True)  # before donation
    s_shard = state_shardings(opt, p_shard, params, mesh)
    state = init_train_state(params, opt, s_shard)
    full = make_batch()
    rows = sharding.local_batch_slice(mesh, BATCH, rules)
    batch = sharding.shard_batch({k: v[rows] for k, v in full.items()}, mesh, rules)
    step = make_train_step(lm_loss, opt, mesh, s_shard, sharding.batch_shardings(mesh, batch, rules), rules)
    losses = []
    for _ in range(STEPS):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    ref = jax.jit(init_params, static_argnums=0)(MODEL, jax.random.key(0))["embed_tokens"]
    if sharding.is_main_process():
        Path(out).write_text(json.dumps({"losses": losses, "processes": jax.process_count(),
                                         "devices": jax.device_count(), "rows": [rows.start, rows.stop],
                                         "init_diff": float(np.max(np.abs(np.asarray(first) -
                                                                             np.asarray(ref))))}))


def _run(cmd: list[str], env_extra: dict[str, str]) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env.update(env_extra)
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_processes_match_one_process():
    with tempfile.TemporaryDirectory() as tmp:
        multi, single = Path(tmp, "multi.json"), Path(tmp, "single.json")
        worker_cmd = [sys.executable, "-m", "tests.test_multihost"]
        procs = [
            _run(["bash", "launch/multiprocess_cpu.sh", "2", "2", *worker_cmd, str(multi), "dcn"],
                 {"LOG_DIR": str(Path(tmp, "logs"))}),
            _run([*worker_cmd, str(single)], {"JAX_PLATFORMS": "cpu",
                                              "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}),
        ]
        try:
            outputs = [p.communicate(timeout=240)[0] for p in procs]
        finally:  # a hung run must not outlive the test (SIGTERM lets the launcher stop its workers)
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(timeout=30)
        for p, out in zip(procs, outputs):
            assert p.returncode == 0, out[-4000:]
        got, want = json.loads(multi.read_text()), json.loads(single.read_text())
    assert (got["processes"], got["devices"]) == (2, 4)
    assert (want["processes"], want["devices"]) == (1, 4)
    assert got["rows"] == [0, 4] and want["rows"] == [0, 8]  # process 0 loaded only its half of the batch
    # Sharded init draws the same numbers as init_params (partitionable threefry); the normal transform may
    # round differently once fused, hence 1 ulp-level tolerance on values of ~0.02.
    assert got["init_diff"] <= 1e-7 and want["init_diff"] <= 1e-7, (got["init_diff"], want["init_diff"])
    assert len(got["losses"]) == STEPS
    assert got["losses"][-1] < got["losses"][0]  # it trains
    for a, b in zip(got["losses"], want["losses"]):
        assert abs(a - b) <= 1e-5, (got["losses"], want["losses"])


if __name__ == "__main__":
    worker(sys.argv[1], dcn=len(sys.argv) > 2 and sys.argv[2] == "dcn")
