"""2 processes x 4 CPU devices (jax.distributed over loopback, gloo) load and save an HF checkpoint sharded.

Loading with FSDP across the two processes, each reads about half of the checkpoint's bytes (at most 60%) and
every shard it holds equals the whole-file reading bit for bit. Saving, the files are split between the
processes: with FSDP across them no process holds a tensor whole (each is gathered, one at a time, to its
file's writer); with the params replicated over the processes each writes its files from its own shards. Both
write back the original tensors bit for bit.

The worker half runs as `python -m tests.model.test_hf_stream_multihost HF_DIR OUT_DIR` under
launch/multiprocess_cpu.sh (as tests/test_multihost.py does).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _mesh_config(dcn_axis: str):
    import ml_collections

    ici = {"data": 1, "fsdp": 2, "tensor": 2} if dcn_axis == "fsdp" else {"data": 1, "fsdp": 4, "tensor": 1}
    dcn = {"data": 1, "fsdp": 1, "tensor": 1} | {dcn_axis: 2}
    return ml_collections.ConfigDict({"mesh": {"name": "cpu", "shape": ici, "dcn_shape": dcn,
                                               "logical_axis_rules": ()}})


def worker(hf_dir: pathlib.Path, out: pathlib.Path) -> None:
    """Load over a mesh whose fsdp axis spans both processes, check the shards, save two ways; write a report."""
    from swerl_jax import sharding

    sharding.initialize_distributed()  # JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID

    import jax

    from swerl_jax.model.convert import CheckpointReader, checkpoint_tensors, hf_config_to_llama, load_hf
    from swerl_jax.model.hf_write import save_tensors
    from tests.model.test_hf_stream import reference

    cfg = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
    report: dict = {"process": jax.process_index(), "processes": jax.process_count()}
    for layout in ("fsdp", "data"):  # which mesh axis spans the two processes
        c = _mesh_config(layout)
        mesh = sharding.create_mesh(c, model_config=cfg)
        shardings = sharding.param_shardings(cfg, mesh, sharding.logical_axis_rules(c))
        reader = CheckpointReader(hf_dir)
        _, params = load_hf(hf_dir, shardings=shardings, reader=reader)
        want = reference(hf_dir)  # the whole files, read after the count, only to check against
        mismatched = [jax.tree_util.keystr(path) for path, leaf in jax.tree_util.tree_leaves_with_path(params)
                      for shard in leaf.addressable_shards
                      if not np.array_equal(np.asarray(shard.data),
                                            _at(want, path)[shard.index])]
        written = save_tensors(checkpoint_tensors(cfg), params, out / layout, 60_000, {"format": "pt"})
        report[layout] = {"bytes_read": reader.bytes_read, "mismatched": mismatched,
                          "written": sorted(p.name for p in written)}
    (out / f"process_{jax.process_index()}.json").write_text(json.dumps(report))


def _at(tree, path):
    for key in path:
        tree = tree[key.key]
    return tree


@pytest.mark.slow
def test_two_processes_each_read_their_half_and_save_without_gathering(tmp_path):
    from safetensors.numpy import load_file

    from swerl_jax.model.config import get_model_config
    from tests.model.hf_models import save_random_hf

    hf_dir = tmp_path / "hf"
    save_random_hf(get_model_config("tiny"), hf_dir, seed=9, max_shard_size="100KB")
    state = {k: v for f in sorted(hf_dir.glob("*.safetensors")) for k, v in load_file(f).items()}
    total = sum(v.nbytes for v in state.values())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["LOG_DIR"] = str(tmp_path / "logs")
    done = subprocess.run(["bash", "launch/multiprocess_cpu.sh", "2", "4", sys.executable, "-m",
                           "tests.model.test_hf_stream_multihost", str(hf_dir), str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    reports = [json.loads((tmp_path / f"process_{p}.json").read_text()) for p in (0, 1)]
    assert [r["processes"] for r in reports] == [2, 2]
    for r in reports:
        # FSDP across processes: each reads its half (plus the small replicated norms), bit-exact
        assert r["fsdp"]["bytes_read"] <= 0.6 * total, (r["fsdp"]["bytes_read"], total)
        assert r["fsdp"]["mismatched"] == [] and r["data"]["mismatched"] == []
        # replicated over the processes: each holds, so reads, the whole model (the DCN axis is data)
        assert r["data"]["bytes_read"] == total
    for layout in ("fsdp", "data"):
        files = [r[layout]["written"] for r in reports]
        assert files[0] and files[1] and not set(files[0]) & set(files[1]), files  # both wrote, disjoint files
        out = tmp_path / layout
        index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
        assert sorted(set(index.values())) == sorted(files[0] + files[1])
        saved = {k: v for f in sorted(out.glob("*.safetensors")) for k, v in load_file(f).items()}
        assert sorted(saved) == sorted(state)
        for name, value in state.items():
            np.testing.assert_array_equal(saved[name], value, err_msg=f"{layout}: {name}")


if __name__ == "__main__":
    worker(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
