"""What launch/compile.py reports of a compiled program: memory, cost, roofline, collectives, and its text form.

XLA's cost analysis counts a loop body once (the layer scan, the micro-batch scan) and cannot see inside a
Pallas kernel, so the roofline takes the larger of XLA's FLOPs and the analytic `model_flops`, and scales
XLA's bytes by the same factor (which over-counts bytes where the kernel hid FLOPs).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from swerl_jax.meshes import MeshSpec
from swerl_jax.model.config import LlamaConfig

GiB = 1024**3
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4, "u32": 4,
                "f32": 4, "s64": 8, "u64": 8, "f64": 8}


def collectives(hlo_text: str) -> dict[str, dict[str, int]]:
    """Collective ops in compiled HLO text by kind: {kind: {"count", "bytes"}} (result shapes' bytes; an
    instruction inside a loop body is counted once, as it appears in the text)."""
    out: dict[str, dict[str, int]] = {}
    pattern = re.compile(r"=\s*(\(.*?\)|\S+)\s+(" + "|".join(COLLECTIVES) + r")(-start)?\(")
    for line in hlo_text.splitlines():
        m = pattern.search(line)
        if not m:
            continue
        nbytes = sum(_DTYPE_BYTES.get(dt, 4) * _numel(dims)
                     for dt, dims in re.findall(r"([a-z]+\d*)\[([\d,]*)\]", m.group(1)))
        entry = out.setdefault(m.group(2), {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += nbytes
    return out


def _numel(dims: str) -> int:
    n = 1
    for d in filter(None, dims.split(",")):
        n *= int(d)
    return n


def model_flops(model: LlamaConfig, rows: int, seq: int, loss_len: int, backward: bool, remat: str) -> float:
    """Analytic matmul FLOPs of one pass over rows x seq tokens (all devices): 2 N_layers + causal attention
    (2 x 2 H D T^2 / 2) + the head over the scored positions; x3 with the backward, +1 forward under remat."""
    e, f, d, h, kv = model.hidden_size, model.intermediate_size, model.head_size, model.num_heads, model.num_kv_heads
    layer = 2 * seq * (e * d * (2 * h + 2 * kv) + 3 * e * f) + 2 * h * d * seq * seq
    fwd = rows * (model.num_layers * layer + 2 * loss_len * e * model.vocab_size)
    if not backward:
        return float(fwd)
    recompute = rows * model.num_layers * layer if remat != "none" else 0
    return float(3 * fwd + recompute)


def analyse(name: str, lowered: Any, spec: MeshSpec, planner_bytes: int | None, model_flops_total: float,
            n_devices: int, out_dir: Path | None, useful_flops_total: float | None = None) -> dict[str, Any]:
    """Compile `lowered` and collect memory, cost, roofline and collectives per device (see the module doc)."""
    t0 = time.perf_counter()
    try:
        compiled = lowered.compile()
    except Exception as err:  # XLA refuses a program that cannot fit in HBM: that is a result, not a crash
        message = str(err).strip().splitlines()[0][:500]
        if "exceed" not in message and "memory" not in message.lower():
            raise
        result = {"program": name, "compile_s": round(time.perf_counter() - t0, 2), "error": message,
                  "planner_bytes": planner_bytes, "hbm_bytes": spec.hbm_bytes}
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"{name}.json").write_text(json.dumps(result, indent=1))
        return result
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    hlo = compiled.as_text()
    xla_flops, xla_bytes = float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))
    arg, out, tmp, alias = (int(mem.argument_size_in_bytes), int(mem.output_size_in_bytes),
                            int(mem.temp_size_in_bytes), int(mem.alias_size_in_bytes))
    flops = max(model_flops_total / n_devices, xla_flops)
    # Bytes scale with the loop trip counts XLA left out as FLOPs do; scaled alike when the analytic FLOPs win.
    bytes_ = xla_bytes * (flops / xla_flops if xla_flops else 1.0)
    t_compute, t_memory = flops / spec.peak_bf16_flops, bytes_ / spec.hbm_bandwidth
    step_s = max(t_compute, t_memory)
    result = {
        "program": name, "compile_s": round(compile_s, 2),
        "argument_bytes": arg, "output_bytes": out, "temp_bytes": tmp, "alias_bytes": alias,
        "peak_bytes": arg + out - alias + tmp, "planner_bytes": planner_bytes, "hbm_bytes": spec.hbm_bytes,
        "xla_flops": xla_flops, "xla_bytes_accessed": xla_bytes,
        "model_flops_per_device": model_flops_total / n_devices,
        "roofline_step_s": step_s, "roofline_bound": "compute" if t_compute >= t_memory else "memory",
        # MFU counts the model's FLOPs (6 N D + attention), not remat's recompute: full remat caps it at 75%
        "mfu_bound": ((useful_flops_total or model_flops_total) / n_devices) / (step_s * spec.peak_bf16_flops)
        if step_s else 0.0,
        "collectives": collectives(hlo),
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{name}.hlo.txt").write_text(hlo)
        (out_dir / f"{name}.json").write_text(json.dumps(result, indent=1))
    return result


def format_report(report: dict[str, Any]) -> str:
    """One block per program: memory (XLA vs planner), FLOPs, bytes, roofline, MFU bound, collectives."""
    slices = f" x {report['slices']} slices" if report.get("slices", 1) > 1 else ""
    lines = [f"{report['model']} on {report['mesh']} ({report['topology']}{slices}, {report['devices']} chips, mesh "
             f"{report['mesh_shape']}, attention {report['attention_impl'] or 'xla'}, remat {report['remat']})"]
    for name, r in report["programs"].items():
        if "error" in r:
            planned = f"{r['planner_bytes'] / GiB:.2f} GiB" if r.get("planner_bytes") is not None else "-"
            lines.append(f"[{name}] XLA refused it after {r['compile_s']:.1f} s (planner {planned}): {r['error']}")
            continue
        planned = f"{r['planner_bytes'] / GiB:.3f}" if r.get("planner_bytes") is not None else "-"
        verdict = "fits" if r["peak_bytes"] <= r["hbm_bytes"] else "DOES NOT FIT"
        lines += [f"[{name}] compiled in {r['compile_s']:.1f} s; per chip GiB: arguments "
                  f"{r['argument_bytes'] / GiB:.3f}"
                  f", outputs {r['output_bytes'] / GiB:.3f}, temporaries {r['temp_bytes'] / GiB:.3f}, aliased "
                  f"{r['alias_bytes'] / GiB:.3f} -> peak {r['peak_bytes'] / GiB:.3f} (planner {planned}; HBM "
                  f"{r['hbm_bytes'] / GiB:.1f}: {verdict})",
                  f"  FLOPs/chip: XLA {r['xla_flops']:.3e} (loop bodies once), model {r['model_flops_per_device']:.3e};"
                  f" bytes accessed (XLA) {r['xla_bytes_accessed']:.3e}",
                  f"  roofline step {r['roofline_step_s'] * 1e3:.1f} ms ({r['roofline_bound']}-bound), MFU bound "
                  f"{r['mfu_bound']:.0%}",
                  "  collectives: " + (", ".join(f"{k} x{v['count']} {v['bytes'] / GiB:.3f} GiB"
                                                 for k, v in sorted(r["collectives"].items())) or "none")]
        if "updates_per_step" in r:  # the program is one optimizer update; a step runs it this many times
            lines.append(f"  one update: {r['rows']} rows in {r['num_micro_batches']} micro-batch(es); "
                         f"{r['updates_per_step']} update(s) per step (rl.update_epochs x rl.ppo_minibatches)")
    return "\n".join(lines)
