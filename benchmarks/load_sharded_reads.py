"""Sharded HF loading as the operating system counts it: bytes read from storage, wall time, peak host memory.

A random fp32 Llama checkpoint (`load_checkpoint.write_checkpoint`, 828 MB by default) is loaded in fresh
processes, FSDP over every device (`sharding.param_shardings`), each load from files not in the page cache:

- one process x 8 CPU devices: `old`, the path before issue 50 (every slice through safetensors' mapped slicing,
  straight into the target layout; `OldReader` below), against `auto`, today's default (the same layout in one
  process, row blocks by pread), and `rows` (whole rows per device, resharded on device), in turn, --repeats
  times;
- two processes x 4 CPU devices (jax.distributed, gloo), FSDP across both, each loading its own private copy
  of the files (as on separate hosts): `old` and `auto`, twice in the same processes (the second load finds
  the reshard programs compiled).

Per load: `/proc/self/io` read_bytes (storage reads, readahead included), wall and CPU seconds (all threads;
less swayed than wall time by other jobs on a shared machine), and peak extra host memory (VmHWM reset right
before the load, minus VmRSS then). The page cache is dropped with posix_fadvise DONTNEED on the files (other
processes' caches untouched; /proc/sys/vm/drop_caches would drop every job's).

    JAX_PLATFORMS=cpu python benchmarks/load_sharded_reads.py
    JAX_PLATFORMS=cpu python benchmarks/load_sharded_reads.py --layers 2 --vocab 8000 --repeats 1   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.load_checkpoint import _status, start_peak, write_checkpoint  # noqa: E402


def read_bytes() -> int:
    """Bytes this process has had read from storage (`/proc/self/io` read_bytes)."""
    io = pathlib.Path("/proc/self/io").read_text()
    return int(next(line.split()[1] for line in io.splitlines() if line.startswith("read_bytes:")))


def drop_cache(hf_dir: pathlib.Path) -> None:
    """Drop the files of `hf_dir` from the page cache (they are clean: written and fsync'ed)."""
    for f in hf_dir.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def measure(mode: str, hf_dir: pathlib.Path) -> dict:
    """Load `hf_dir` with FSDP over every device the way `mode` says; {seconds, read_bytes, extra}."""
    import jax
    import numpy as np
    from jax.sharding import Mesh
    from safetensors import safe_open

    from swerl_jax import sharding
    from swerl_jax.meshes import AXES
    from swerl_jax.model.convert import CheckpointReader, hf_config_to_llama, load_hf

    class OldReader(CheckpointReader):
        """The reader before issue 50: every slice, row blocks included, through safetensors' mapped slicing."""

        def read(self, name, index):
            key = self.key(name)
            with safe_open(self.files[key], framework="numpy") as f:
                part = f.get_slice(key)[index]
            self.bytes_read += part.nbytes
            return part

    config = hf_config_to_llama(json.loads((hf_dir / "config.json").read_text()))
    mesh = Mesh(np.asarray(jax.devices()).reshape(1, jax.device_count(), 1), AXES)
    shardings = sharding.param_shardings(config, mesh)
    jax.block_until_ready(jax.device_put(np.zeros(8), jax.devices()[0]))  # the runtime up, before the count
    reader = OldReader(hf_dir) if mode == "old" else CheckpointReader(hf_dir)
    rss, before = start_peak(), read_bytes()
    start, cpu = time.perf_counter(), time.process_time()
    params = load_hf(hf_dir, shardings=shardings, reader=reader, read="direct" if mode == "old" else mode)[1]
    jax.block_until_ready(params)
    return {"mode": mode, "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
            "read_bytes": read_bytes() - before, "extra": _status("VmHWM") - rss}


def child(mode: str, hf_dir: pathlib.Path) -> None:
    """One single-process load in this fresh process, from a cold page cache; prints the result as JSON."""
    drop_cache(hf_dir)
    print(json.dumps(measure(mode, hf_dir)))


def worker(mode: str, hf_dir: pathlib.Path, out: pathlib.Path) -> None:
    """One of two processes: load a private, uncached copy of `hf_dir` (FSDP across both); write the result."""
    from swerl_jax import sharding

    sharding.initialize_distributed()
    import jax

    results = []
    for _ in range(2):  # the second load finds the reshard programs compiled, as a reload in a long run would
        copy = out / f"copy_{jax.process_index()}"
        shutil.copytree(hf_dir, copy)
        drop_cache(copy)
        try:
            results.append(measure(mode, copy))
        finally:
            shutil.rmtree(copy)
    (out / f"{mode}_{jax.process_index()}.json").write_text(json.dumps(results))


def run_child(mode: str, hf_dir: pathlib.Path) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run([sys.executable, __file__, "--child", mode, str(hf_dir)], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"child {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_pair(mode: str, hf_dir: pathlib.Path, out: pathlib.Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAX_"))}
    done = subprocess.run(["bash", str(REPO / "launch/multiprocess_cpu.sh"), "2", "4", sys.executable, __file__,
                           "--worker", mode, str(hf_dir), str(out)], env={**env, "LOG_DIR": str(out / "logs")},
                          capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode:
        raise SystemExit(f"two-process load ({mode}) failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return [json.loads((out / f"{mode}_{p}.json").read_text()) for p in (0, 1)]  # [process][first, second]


def row(label: str, rs: list[dict], total: int, memory: bool = True) -> str:
    sec, cpu = [r["seconds"] for r in rs], [r["cpu"] for r in rs]
    extra = f"{max(r['extra'] for r in rs) / total:.2f}" if memory else "n/a"
    return (f"| {label} | {statistics.median(sec):.2f} ({min(sec):.2f}-{max(sec):.2f}) | "
            f"{statistics.median(cpu):.2f} | {max(r['read_bytes'] for r in rs) / total:.3f} | {extra} |")


def main(argv: list[str] | None = None) -> None:
    """Write the checkpoint; the single-process loads in turn; the two-process loads."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--mlp", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5, help="single-process loads per mode, in turn (0: none)")
    ap.add_argument("--no-pairs", action="store_true", help="skip the two-process loads")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "DIR", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child[0], pathlib.Path(a.child[1]))
    if a.worker:
        return worker(a.worker[0], pathlib.Path(a.worker[1]), pathlib.Path(a.worker[2]))
    with tempfile.TemporaryDirectory(dir=REPO.parent) as tmp:
        hf_dir = pathlib.Path(tmp) / "ckpt"
        total = write_checkpoint(hf_dir, a)
        files = sum(f.stat().st_size for f in hf_dir.iterdir())
        print(f"checkpoint: {total / 1e6:.0f} MB fp32 tensors ({total // 4 / 1e6:.0f}M params), {files / 1e6:.0f} MB"
              f" of files; ratios below are of the tensors' bytes", flush=True)
        single: dict[str, list] = {"old": [], "auto": [], "rows": []}
        for _ in range(a.repeats):
            for mode in single:
                single[mode].append(run_child(mode, hf_dir))
        if a.repeats:
            print("\n| one process x 8 devices, FSDP | wall s, median (range) | CPU s, median | read_bytes / ckpt | "
                  "peak extra / ckpt |\n| --- | ---: | ---: | ---: | ---: |")
        for mode, rs in single.items() if a.repeats else ():
            print(row(mode, rs, total), flush=True)
        print("\n| two processes x 4 devices, FSDP across, private copies | wall s, median (range) over the 2 | "
              "CPU s, median | read_bytes / ckpt, max of the 2 | peak extra / ckpt, max of the 2 |\n"
              "| --- | ---: | ---: | ---: | ---: |")
        for mode in () if a.no_pairs else ("old", "auto"):
            out = pathlib.Path(tmp) / f"pair_{mode}"
            out.mkdir()
            rs = run_pair(mode, hf_dir, out)
            for k, when in enumerate(("first load", "second load, programs compiled")):
                # the second load's peak is not comparable: the allocator reuses what the first one freed
                print(row(f"{mode}, {when}", [r[k] for r in rs], total, memory=k == 0) + "  " +
                      " / ".join(f"{r[k]['read_bytes'] / total:.3f}" for r in rs), flush=True)


if __name__ == "__main__":
    main()
