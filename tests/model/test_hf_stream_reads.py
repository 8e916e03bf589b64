"""What a streamed HF load (model/hf_stream.py) reads and holds, on the suite's 8 CPU devices: the slice mapping
reads only a shard's rows, a block of rows reads only its bytes from storage (the kernel's count), the 70B pod's read
layout gives each host a 64th of the checkpoint, and the host memory stays at the final shards (measured in fresh
processes, against the old whole-model path). That any layout loads and saves bit-exact is in
tests/model/test_hf_stream_layouts.py; the two-process reads in tests/model/test_hf_stream_multihost.py."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from safetensors.numpy import load_file, save_file

from swerl_jax import sharding
from swerl_jax.meshes import AXES
from swerl_jax.model.config import get_model_config
from swerl_jax.model.convert import CheckpointReader, hf_config_to_llama, layer_tensors, load_hf
from swerl_jax.model.hf_load import rows_sharding
from swerl_jax.model.hf_stream import TensorMap, hf_index
from tests.model.hf_checkpoints import (
    checkpoint_state,
    fsdp_shardings,
    private_copy,
    read_bytes,
    write_random_checkpoint,
)

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_70b_pod_reads_a_64th_per_host():
    """The paper's mesh (h100x512: fsdp 512 = 8 chips x 64 hosts; stand-in devices, nothing is read): every 2-D
    leaf's read layout puts the six factors of 2 that span the hosts on whole HF rows or whole layers (128256
    vocab rows = 2^8 x 501, 64 q heads, 8 KV heads x 80 layers, 28672 MLP rows), so each host reads 1/64."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Device:
        id: int
        process_index: int
        platform: str = "cpu"

    devices = np.array([Device(i, i // 8) for i in range(512)], dtype=object).reshape(1, 512, 1)
    mesh = Mesh(devices, AXES)
    cfg = get_model_config("llama3.3-70b")
    specs = sharding.param_partition_specs(cfg)
    from swerl_jax.model.convert import checkpoint_tensors
    from swerl_jax.model.hf_stream import row_axis

    hosts = {f"fsdp:{k}" for k in range(6)}  # 64 hosts, the major factors of the fsdp axis
    for m in checkpoint_tensors(cfg):
        if len(m.hf_shape) < 2:
            continue
        spec = specs
        for key in m.path:
            spec = spec[key]
        read = rows_sharding(m, NamedSharding(mesh, spec)).spec
        homes = [read[row_axis(m)]] + ([read[0]] if m.stacked else [])
        on_rows = {a for home in homes for a in (home or ())}
        assert hosts <= on_rows, (m.path, read)
        others = [entry for d, entry in enumerate(read) if d != row_axis(m) and not (m.stacked and d == 0)]
        assert all(entry is None for entry in others), (m.path, read)  # no other dim split: whole rows read


def test_a_block_of_rows_reads_only_its_bytes_from_storage(tmp_path):
    """By the kernel's count: half the rows of a 4 MiB tensor in an uncached file read 2 MiB from storage (plus a
    page of header), not the whole file (safetensors maps it, and the kernel reads 8 MiB around a touched page
    here). Listing the tensors and checking their shapes read the header alone."""
    rng = np.random.default_rng(0)
    (tmp_path / "src").mkdir()
    save_file({"w": rng.standard_normal((1024, 1024), dtype=np.float32)}, tmp_path / "src" / "model.safetensors")
    want = load_file(tmp_path / "src" / "model.safetensors")["w"]
    copy = private_copy(tmp_path / "src", tmp_path / "copy")
    start = read_bytes()
    reader = CheckpointReader(copy)  # lists the tensors: the header only
    reader.check("w", (1024, 1024))
    header = read_bytes() - start
    got = reader.read("w", (slice(256, 768), slice(None)))
    total = read_bytes() - start
    np.testing.assert_array_equal(got, want[256:768])
    assert header <= 8192 and total <= 2 * 2**20 + 8192, (header, total)
    assert reader.bytes_read == 2 * 2**20


def test_slice_mapping_reads_only_the_shard_when_heads_are_whole():
    # q_proj of 4 heads x 16: HF [64, 32] rows (head, d), ours [32, 4, 16]; a shard of heads 2..3 and embed 8..16
    m = TensorMap(("q",), ("q",), (64, 32), (32, 4, 16), True, False)
    hf, cover, keep = hf_index(m, (slice(8, 16), slice(2, 4), slice(None)))
    assert hf == (slice(32, 64), slice(8, 16)) and cover == (8, 2, 16) and keep == (slice(None),) * 2 + (slice(None),)
    # half a head: the covering rows (the whole heads) are read, the columns cut after the reshape
    hf, cover, keep = hf_index(m, (slice(None), slice(1, 2), slice(8, 16)))
    assert hf == (slice(16, 32), slice(0, 32)) and cover == (32, 1, 16) and keep[2] == slice(8, 16)
    # a bias, HF [heads*d] -> ours [heads, d], not transposed: heads 1..3 are rows 16..48
    bias = TensorMap(("b",), ("b",), (64,), (4, 16), False, False)
    assert hf_index(bias, (slice(1, 3), slice(None))) == ((slice(16, 48),), (2, 16), (slice(None), slice(None)))


# --- host memory, measured in fresh processes -------------------------------------------------------------------

def old_load(hf_dir: pathlib.Path, shardings) -> dict:
    """The path before streaming (kept for the comparison): every tensor whole on the host, `np.stack` per layer
    group, `jnp.asarray` onto the default device, then `jax.device_put` onto the shardings."""
    import jax.numpy as jnp

    state = checkpoint_state(hf_dir)
    cfg = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
    layers: dict = {}
    for (group, leaf), t in layer_tensors(cfg).items():
        stacked = np.stack([t.to_ours(state[f"model.layers.{i}.{t.hf_name}"]) for i in range(cfg.num_layers)])
        layers.setdefault(group, {})[leaf] = jnp.asarray(stacked)
    params = {"embed_tokens": jnp.asarray(state["model.embed_tokens.weight"]), "layers": layers,
              "norm": {"scale": jnp.asarray(state["model.norm.weight"])},
              "lm_head": jnp.asarray(state["lm_head.weight"].T)}
    return jax.device_put(params, shardings)


def _status(key: str) -> int:
    status = pathlib.Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith(key + ":"))) * 1024


def memory_child(mode: str, hf_dir: pathlib.Path) -> None:
    """Run in a fresh process with 8 CPU devices: build the FSDP shardings, then load (`ours`, `old`); print how
    far the peak resident set rose above the resident set at the start of the load, in bytes (the kernel's peak,
    VmHWM, is reset first, so imports and set-up do not count)."""
    cfg = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
    shardings = fsdp_shardings(cfg)
    jax.block_until_ready(jax.device_put(np.zeros(8), jax.devices()[0]))
    pathlib.Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    start = _status("VmRSS")
    jax.block_until_ready(load_hf(hf_dir, shardings=shardings)[1] if mode == "ours" else old_load(hf_dir, shardings))
    print(_status("VmHWM") - start)


def test_host_memory_stays_at_the_final_shards(tmp_path):
    """Measured rise of the peak resident set of a fresh process while it loads a 44 MiB checkpoint onto 8 CPU
    devices (FSDP). On CPU the devices' shards live in host memory, so 1.0x is the floor:
    ours holds the shards, the shard being read and the mapped pages of the one tensor it is read from (measured
    1.1x); the old path held the whole model on the host, a copy on one device and the shards (measured 4.1x). The
    bound, 1.5x, sits between them: ours < bound < old."""
    cfg = get_model_config("tiny").replace(vocab_size=2000, hidden_size=512, intermediate_size=1024, num_layers=4,
                                           num_heads=8, num_kv_heads=4)
    size = write_random_checkpoint(tmp_path / "hf", cfg)
    # the old path's resharding compiles: from the suite's cache, so the children measure loading, not XLA
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_COMPILATION_CACHE_DIR": str(jax.config.jax_compilation_cache_dir or ""),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    procs = {mode: subprocess.Popen([sys.executable, "-m", "tests.model.test_hf_stream_reads", mode,
                                     str(tmp_path / "hf")],
                                    cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for mode in ("ours", "old")}
    extra = {}
    for mode, p in procs.items():
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        extra[mode] = int(out.split()[-1])
    bound = 1.5 * size
    assert extra["ours"] < bound < extra["old"], \
        f"extra RSS: ours {extra['ours'] / size:.2f}x, old {extra['old'] / size:.2f}x the checkpoint"


if __name__ == "__main__":
    memory_child(sys.argv[1], pathlib.Path(sys.argv[2]))
