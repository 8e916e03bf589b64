"""2 processes x 4 CPU devices (jax.distributed over loopback, gloo) load and save an HF checkpoint sharded.

Loading with FSDP across the two processes, each reads about half of the checkpoint's bytes (at most 60%) as the
operating system counts them (`/proc/self/io` read_bytes, each process loading its own private copy of the files
with their pages dropped from the page cache, as on separate hosts), and every shard it holds equals the
whole-file reading bit for bit; so with the params replicated over the processes (the other half comes over
the network). Read straight into the FSDP layout (`read="direct"`, the path before issue 50) each reads the
whole checkpoint: the control that shows the counter sees the loads. Saving, the files are split between the
processes: with FSDP across them no process holds a tensor whole (each is gathered, one at a time, to its
file's writer); with the params replicated over the processes each writes its files from its own shards. Both
write back the original tensors bit for bit.

The worker half runs as `python -m tests.model.test_hf_stream_multihost HF_DIR OUT_DIR SMALL_DIR` under
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


def os_count(src: pathlib.Path, dst: pathlib.Path, shardings, read: str = "auto") -> tuple[int, list[str]]:
    """(read_bytes while loading a private, uncached copy of `src` onto `shardings` as `read` says, the leaves
    that differ from the whole-file reading)."""
    import jax

    from swerl_jax.model.convert import load_hf
    from tests.model.hf_checkpoints import private_copy, read_bytes, reference

    copy = private_copy(src, dst)
    before = read_bytes()
    _, params = load_hf(copy, shardings=shardings, read=read)
    jax.block_until_ready(params)
    count = read_bytes() - before
    return count, _mismatched(params, reference(copy))


def _mismatched(params, want) -> list[str]:
    import jax

    return [jax.tree_util.keystr(path) for path, leaf in jax.tree_util.tree_leaves_with_path(params)
            for shard in leaf.addressable_shards if not np.array_equal(np.asarray(shard.data),
                                                                       _at(want, path)[shard.index])]


def worker(hf_dir: pathlib.Path, out: pathlib.Path, small: pathlib.Path) -> None:
    """Load over a mesh whose fsdp axis spans both processes, check the shards, save two ways, count the bytes
    read from storage loading a private copy of `small`; write a report."""
    from swerl_jax import sharding

    sharding.initialize_distributed()  # JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID

    import jax

    from swerl_jax.model.convert import CheckpointReader, checkpoint_tensors, hf_config_to_llama, load_hf
    from swerl_jax.model.hf_write import save_tensors
    from tests.model.hf_checkpoints import reference

    cfg = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
    report: dict = {"process": jax.process_index(), "processes": jax.process_count()}
    for layout in ("fsdp", "data"):  # which mesh axis spans the two processes
        c = _mesh_config(layout)
        mesh = sharding.create_mesh(c, model_config=cfg)
        shardings = sharding.param_shardings(cfg, mesh, sharding.logical_axis_rules(c))
        reader = CheckpointReader(hf_dir)
        _, params = load_hf(hf_dir, shardings=shardings, reader=reader)
        mismatched = _mismatched(params, reference(hf_dir))
        written = save_tensors(checkpoint_tensors(cfg), params, out / layout, 60_000, {"format": "pt"})
        small_cfg = hf_config_to_llama(json.loads((small / "config.json").read_text()))
        small_shardings = sharding.param_shardings(small_cfg, mesh, sharding.logical_axis_rules(c))
        report[layout] = {"bytes_read": reader.bytes_read, "mismatched": mismatched,
                          "written": sorted(p.name for p in written)}
        for read in ("auto", "direct"):
            report[layout][f"os_read_bytes_{read}"], os_mismatched = os_count(
                small, out / f"private_{layout}_{read}_{jax.process_index()}", small_shardings, read)
            report[layout]["mismatched"] += os_mismatched
    (out / f"process_{jax.process_index()}.json").write_text(json.dumps(report))


def _at(tree, path):
    for key in path:
        tree = tree[key.key]
    return tree


@pytest.mark.slow
def test_two_processes_each_read_their_half_and_save_without_gathering(tmp_path):
    from safetensors.numpy import load_file

    from swerl_jax.model.config import get_model_config
    from tests.model.hf_checkpoints import write_random_checkpoint
    from tests.model.hf_models import save_random_hf

    hf_dir = tmp_path / "hf"
    save_random_hf(get_model_config("tiny"), hf_dir, seed=9, max_shard_size="100KB")
    state = {k: v for f in sorted(hf_dir.glob("*.safetensors")) for k, v in load_file(f).items()}
    total = sum(v.nbytes for v in state.values())
    # 8.9 MB in 2 files: any read through a mapping pulls in the kernel's 8 MiB read-around, about a whole file,
    # so <= 60% takes reads of exactly the rows; small enough to copy four times per process in under a second
    small_cfg = get_model_config("tiny").replace(vocab_size=2048, hidden_size=256, intermediate_size=512)
    small_total = write_random_checkpoint(tmp_path / "small", small_cfg)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    env["LOG_DIR"] = str(tmp_path / "logs")
    done = subprocess.run(["bash", "launch/multiprocess_cpu.sh", "2", "4", sys.executable, "-m",
                           "tests.model.test_hf_stream_multihost", str(hf_dir), str(tmp_path), str(tmp_path / "small")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    reports = [json.loads((tmp_path / f"process_{p}.json").read_text()) for p in (0, 1)]
    assert [r["processes"] for r in reports] == [2, 2]
    for r in reports:
        assert r["fsdp"]["mismatched"] == [] and r["data"]["mismatched"] == []
        # Each process reads its half from storage, as the OS counts it (plus the replicated norms and the files'
        # headers), then the shards are resharded on device: with FSDP across the processes (before issue 50 a
        # column block of every row: every page, the whole file) and with the params replicated over them (the
        # DCN axis is data: the other half comes over the network, not from storage)
        for layout in ("fsdp", "data"):
            assert r[layout]["os_read_bytes_auto"] <= 0.6 * small_total, (layout, r[layout], small_total)
        # the control: read as the target sharding lays it out ("direct", the path before issue 50), each process
        # reads every page; the OS count sees the loads
        assert r["fsdp"]["os_read_bytes_direct"] >= 0.95 * small_total, (r["fsdp"], small_total)
        assert r["data"]["bytes_read"] <= 0.6 * total  # the loader's own count agrees (it was 100%: replicated)
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
    worker(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))
