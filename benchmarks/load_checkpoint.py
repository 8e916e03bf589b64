"""Loading an HF checkpoint onto 8 devices with FSDP: wall time and peak host memory, ours against the others.

A synthetic Llama checkpoint (random fp32 weights, HF safetensors shards + index, ~2 GB by default) is loaded
in a fresh child process per loader, one after another:

- `streamed`: `load_hf(..., shardings=param_shardings(...))`, each shard read straight into its device;
- `old`: the path before streaming (`load_hf` reading every tensor whole into host numpy, `np.stack` per layer
  group, `jnp.asarray` onto the default device, then `jax.device_put` onto the FSDP shardings; kept here verbatim);
- `transformers`: `LlamaForCausalLM.from_pretrained(dir, dtype=float32)` on the same files (torch, CPU).

Peak extra host memory is how far the child's peak resident set (VmHWM, reset just before the load) rose above
its resident set at that moment: imports, the runtime, the mesh and the shardings come before and do not count.
Then two processes x 4 CPU devices (jax.distributed, gloo; FSDP across both) load it the streamed way, each
counting the bytes it read.

    JAX_PLATFORMS=cpu python benchmarks/load_checkpoint.py                    # ~2 GB checkpoint
    JAX_PLATFORMS=cpu python benchmarks/load_checkpoint.py --layers 2 --vocab 8000   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _status(key: str) -> int:
    status = pathlib.Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith(key + ":"))) * 1024


def start_peak() -> int:
    """Reset this process's peak resident set (VmHWM) to the current one, which it returns: the peak read later,
    minus this, is what the work in between added (imports and set-up do not count)."""
    pathlib.Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def write_checkpoint(out: pathlib.Path, a: argparse.Namespace, shard_bytes: int = 500 * 2**20) -> int:
    """A random fp32 Llama checkpoint as HF safetensors shards + index, written with safetensors itself (not our
    writer); returns the tensors' total bytes."""
    import numpy as np
    from safetensors.numpy import save_file

    from swerl_jax.model.config import LlamaConfig
    from swerl_jax.model.convert import llama_to_hf_config

    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.mlp, num_layers=a.layers,
                      num_heads=a.heads, num_kv_heads=a.kv_heads, rope_theta=10000.0, max_position_embeddings=4096)
    e, f, h, kv, d, v = a.hidden, a.mlp, a.heads, a.kv_heads, cfg.head_size, a.vocab
    shapes = {"model.embed_tokens.weight": (v, e)}
    for i in range(a.layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (h * d, e), p + "self_attn.k_proj.weight": (kv * d, e),
                       p + "self_attn.v_proj.weight": (kv * d, e), p + "self_attn.o_proj.weight": (e, h * d),
                       p + "mlp.gate_proj.weight": (f, e), p + "mlp.up_proj.weight": (f, e),
                       p + "mlp.down_proj.weight": (e, f), p + "input_layernorm.weight": (e,),
                       p + "post_attention_layernorm.weight": (e,)})
    shapes.update({"model.norm.weight": (e,), "lm_head.weight": (v, e)})
    rng = np.random.default_rng(0)
    out.mkdir(parents=True, exist_ok=True)
    shards, current, size, total = [], {}, 0, 0
    for name, shape in shapes.items():
        current[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.02)
        size += current[name].nbytes
        total += current[name].nbytes
        if size >= shard_bytes:
            shards.append(current)
            save_file(current, out / f"part-{len(shards)}.tmp", metadata={"format": "pt"})
            current, size = {}, 0
    if current:
        shards.append(current)
        save_file(current, out / f"part-{len(shards)}.tmp", metadata={"format": "pt"})
    weight_map = {}
    for n, shard in enumerate(shards, 1):
        fname = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
        (out / f"part-{n}.tmp").rename(out / fname)
        weight_map.update({k: fname for k in shard})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                  "weight_map": weight_map}))
    (out / "config.json").write_text(json.dumps(llama_to_hf_config(cfg)))
    return total


def old_load(hf_dir: pathlib.Path, shardings) -> dict:
    """The load path before streaming: convert.load_hf as it was (whole tensors, np.stack, jnp.asarray onto the
    default device), then policy.initial_params' jax.device_put onto the shardings."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from safetensors import safe_open

    from swerl_jax.model.convert import hf_config_to_llama, layer_tensors
    from swerl_jax.model.hf_stream import tensor_files

    config = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
    files = tensor_files(hf_dir)

    def get(name: str) -> np.ndarray:
        with safe_open(files[name], framework="flax") as f:
            return np.asarray(f.get_tensor(name))

    def cast(x):
        return jnp.asarray(x.astype(jnp.float32))

    layers: dict = {}
    for (group, leaf), t in layer_tensors(config).items():
        stacked = np.stack([t.to_ours(get(f"model.layers.{i}.{t.hf_name}")) for i in range(config.num_layers)])
        layers.setdefault(group, {})[leaf] = cast(stacked)
    params = {"embed_tokens": cast(get("model.embed_tokens.weight")), "layers": layers,
              "norm": {"scale": cast(get("model.norm.weight"))}, "lm_head": cast(get("lm_head.weight").T)}
    return jax.device_put(params, shardings)


def child(mode: str, hf_dir: pathlib.Path) -> None:
    """One measurement in this (fresh) process; prints {"mode", "seconds", "extra": peak bytes added} as JSON."""
    if mode == "torch_load":
        import torch
        from transformers import LlamaForCausalLM
        rss = start_peak()
        start = time.perf_counter()
        model = LlamaForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32)
        seconds = time.perf_counter() - start
        # transformers may leave the weights mapped from the files, resident only once read: read them all
        # (after the clock stops) so the memory counts what a forward pass would touch
        with torch.no_grad():
            assert all(bool(torch.isfinite(p.sum())) for p in model.parameters())
    else:
        import jax
        import numpy as np
        from jax.sharding import Mesh

        from swerl_jax import sharding
        from swerl_jax.meshes import AXES
        from swerl_jax.model.convert import hf_config_to_llama, load_hf

        config = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
        mesh = Mesh(np.asarray(jax.devices()).reshape(1, jax.device_count(), 1), AXES)
        shardings = sharding.param_shardings(config, mesh)
        jax.block_until_ready(jax.device_put(np.zeros(8), jax.devices()[0]))  # the runtime up, before the count
        rss = start_peak()
        start = time.perf_counter()
        if mode == "streamed":
            jax.block_until_ready(load_hf(hf_dir, shardings=shardings)[1])
        else:
            jax.block_until_ready(old_load(hf_dir, shardings))
        seconds = time.perf_counter() - start
    print(json.dumps({"mode": mode, "seconds": seconds, "extra": _status("VmHWM") - rss}))


def worker(hf_dir: pathlib.Path, out: pathlib.Path) -> None:
    """One of two processes: load with FSDP over both processes' devices, write the bytes this one read."""
    from swerl_jax import sharding

    sharding.initialize_distributed()
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from swerl_jax.meshes import AXES
    from swerl_jax.model.convert import CheckpointReader, hf_config_to_llama, load_hf

    config = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
    mesh = Mesh(np.asarray(jax.devices()).reshape(1, jax.device_count(), 1), AXES)
    reader = CheckpointReader(hf_dir)
    rss = start_peak()
    start = time.perf_counter()
    jax.block_until_ready(load_hf(hf_dir, shardings=sharding.param_shardings(config, mesh), reader=reader)[1])
    (out / f"process_{jax.process_index()}.json").write_text(json.dumps(
        {"bytes_read": reader.bytes_read, "seconds": time.perf_counter() - start,
         "extra": _status("VmHWM") - rss}))


def run_child(mode: str, hf_dir: pathlib.Path, devices: int) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    done = subprocess.run([sys.executable, __file__, "--child", mode, str(hf_dir)], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"child {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    """Write the checkpoint, measure each loader in its own process, then the two-process byte counts."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--mlp", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--dir", default="", help="checkpoint folder (default: a temporary one, deleted after)")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--worker", nargs=2, metavar=("DIR", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child[0], pathlib.Path(a.child[1]))
    if a.worker:
        return worker(pathlib.Path(a.worker[0]), pathlib.Path(a.worker[1]))
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = pathlib.Path(a.dir or tmp) / "ckpt"
        start = time.perf_counter()
        total = write_checkpoint(hf_dir, a)
        print(f"checkpoint: {total / 2**20:.0f} MiB fp32 ({total // 4 / 1e6:.0f}M params) in "
              f"{len(list(hf_dir.glob('*.safetensors')))} files, written in {time.perf_counter() - start:.0f} s",
              flush=True)
        print("| loader (8 CPU devices, FSDP) | wall s | peak extra host MiB | x checkpoint |\n|---|---|---|---|")
        for mode, label in (("streamed", "ours, streamed (`load_hf(..., shardings=)`)"),
                            ("old", "before: `load_hf` + `device_put`"),
                            ("torch_load", "transformers `from_pretrained` (CPU)")):
            r = run_child(mode, hf_dir, 8)
            print(f"| {label} | {r['seconds']:.1f} | {r['extra'] / 2**20:.0f} | {r['extra'] / total:.2f} |",
                  flush=True)
        logs = pathlib.Path(tmp) / "mp"
        logs.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
        done = subprocess.run(["bash", str(REPO / "launch/multiprocess_cpu.sh"), "2", "4", sys.executable, __file__,
                               "--worker", str(hf_dir), str(logs)], env={**env, "LOG_DIR": str(logs / "logs")},
                              capture_output=True, text=True, check=False, cwd=REPO)
        if done.returncode:
            raise SystemExit(f"two-process load failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        print("\n| process (2 x 4 CPU devices, FSDP over 8) | bytes the loader handed back | share of the checkpoint | "
              "wall s | peak extra host MiB |\n|---|---|---|---|---|")
        for p in (0, 1):
            r = json.loads((logs / f"process_{p}.json").read_text())
            print(f"| {p} | {r['bytes_read'] / 2**20:.0f} MiB | {r['bytes_read'] / total:.1%} | {r['seconds']:.1f} | "
                  f"{r['extra'] / 2**20:.0f} |")


if __name__ == "__main__":
    main()
