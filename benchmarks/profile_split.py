"""Split a JAX profile of a train step into its parts: the layers' matmuls, attention, the vocabulary head, the
optimizer, the rest of the layers' work (norms, RoPE, SwiGLU, casts, copies) and the device's idle time.

Input: the profile folder that `jax.profiler.trace(DIR, create_perfetto_trace=True)` wrote (its
`perfetto_trace.json.gz`, or the `*.trace.json.gz` beside it) and, optionally, the optimized HLO text of the
step (`XLA_FLAGS=--xla_dump_to=D --xla_dump_hlo_as_text`: D/*jit_step*after_optimizations.txt). Each GPU kernel
event names its HLO instruction (`args.hlo_op`, or the kernel's name for XLA's own fusions); the HLO text maps
the instruction to the `op_name` of its operations, whose scopes (`attention`, `vocab_head`, `optimizer`, set
in model/llama.py and train_step.py) and `transpose(` (the backward pass) say what it computes. Library kernels
that no instruction claims are classified by name (cuBLAS / CUTLASS / nvjet GEMMs, cuDNN attention).

    python benchmarks/profile_split.py PROFILE_DIR [--hlo FILE] [--steps 2] [--top 25]

Idle is the profiled span (first kernel start to last kernel end) less the union of kernel intervals, per step.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import pathlib
import re

CATEGORIES = ("layer matmuls", "attention", "vocabulary head", "optimizer", "other layer work", "idle")
_GEMM = re.compile(r"gemm|nvjet|cutlass|xmma|cublas|sm90_|sm80_|wgmma|triton_gemm|__dot|matmul", re.I)
_ATTN = re.compile(r"cudnn|fmha|flash|attention|sdpa", re.I)


def load_events(profile_dir: pathlib.Path) -> list[dict]:
    """Complete ('X') events of the device (GPU) processes, from the newest trace under `profile_dir`."""
    paths = sorted(profile_dir.rglob("perfetto_trace.json.gz")) or sorted(profile_dir.rglob("*.trace.json.gz"))
    if not paths:
        raise FileNotFoundError(f"{profile_dir}: no perfetto_trace.json.gz or *.trace.json.gz under it")
    data = json.load(gzip.open(paths[-1]))
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name" and "args" in e}
    device = {pid for pid, n in names.items() if "GPU" in n or "gpu" in n or "/device:" in n}
    return [e for e in events if e.get("ph") == "X" and e.get("pid") in device and e.get("dur", 0) > 0]


def hlo_op_names(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> the op_names of what it computes (a fusion: of its fused computation's ops)."""
    own: dict[str, str] = {}
    calls: dict[str, str] = {}
    comp_ops: dict[str, list[str]] = collections.defaultdict(list)
    current = None
    for line in hlo_text.splitlines():
        head = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and "=" not in line.split("{")[0]:
            current = head.group(1)
            continue
        m = re.match(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=", line)
        if not m:
            continue
        name = m.group(1)
        op = re.search(r'op_name="([^"]*)"', line)
        call = re.search(r"calls=%?([\w.\-]+)", line)
        if op:
            own[name] = op.group(1)
            if current:
                comp_ops[current].append(op.group(1))
        if call:
            calls[name] = call.group(1)
    out = dict(own)
    for name, comp in calls.items():
        ops = comp_ops.get(comp)
        if ops:  # the fused computation's ops say more than the fusion's own (root) op_name
            out[name] = " | ".join(sorted(set(ops)))
    return out


def classify(kernel: str, op_name: str) -> str:
    """One of CATEGORIES (not idle) for a kernel and the op_name(s) of its HLO instruction ('' if unknown)."""
    if "optimizer" in op_name:
        return "optimizer"
    if "vocab_head" in op_name:
        return "vocabulary head"
    if "attention" in op_name or _ATTN.search(kernel):
        return "attention"
    if _GEMM.search(kernel) or "dot_general" in op_name or "einsum" in op_name:
        return "layer matmuls"
    return "other layer work"


def _instruction(event: dict) -> str:
    args = event.get("args", {})
    for key in ("hlo_op", "long_name", "name"):
        if isinstance(args.get(key), str) and args[key]:
            return args[key].split(":")[0]
    return event["name"]


def split(events: list[dict], op_names: dict[str, str], steps: int) -> tuple[dict[str, float], list[tuple]]:
    """(milliseconds per step by category, top kernels as (ms per step, count, category, kernel, op_name))."""
    per_cat: dict[str, float] = collections.defaultdict(float)
    per_kernel: dict[tuple[str, str, str], list[float]] = collections.defaultdict(list)
    fused = {k.replace(".", "_"): v for k, v in op_names.items()}
    for e in events:
        instr = _instruction(e)
        op = op_names.get(instr) or fused.get(instr.replace(".", "_")) or fused.get(e["name"], "")
        cat = classify(e["name"], op)
        per_cat[cat] += e["dur"] / 1e3
        per_kernel[(cat, e["name"][:80], op[:120])].append(e["dur"] / 1e3)
    intervals = sorted((e["ts"], e["ts"] + e["dur"]) for e in events)
    busy, end = 0.0, float("-inf")
    for s, t in intervals:  # union of kernel intervals (streams may overlap)
        if t > end:
            busy += t - max(s, end)
            end = t
    span = (intervals[-1][1] - intervals[0][0]) if intervals else 0.0
    per_cat["idle"] = (span - busy) / 1e3
    out = {c: per_cat.get(c, 0.0) / steps for c in CATEGORIES}
    top = sorted(((sum(v) / steps, len(v) // steps, *k) for k, v in per_kernel.items()), reverse=True)
    return out, top


def report(profile_dir: pathlib.Path, hlo: pathlib.Path | None, steps: int, top: int = 25) -> str:
    """The split as printable text (a table by category, then the top kernels)."""
    events = load_events(profile_dir)
    op_names = hlo_op_names(hlo.read_text()) if hlo else {}
    if not events:
        return f"profile {profile_dir}: no device kernel events in the trace (a CPU run, or the trace is empty)"
    cats, kernels = split(events, op_names, steps)
    total = sum(cats.values())
    lines = [f"profile {profile_dir} ({len(events)} device events, {steps} steps; HLO: {hlo or 'none'})",
             f"{'part':<20} {'ms/step':>9} {'share':>7}"]
    lines += [f"{c:<20} {cats[c]:9.2f} {cats[c] / total:7.1%}" for c in CATEGORIES]
    lines.append(f"{'total (span)':<20} {total:9.2f}")
    lines.append(f"top {top} kernels: ms/step, launches/step, part, kernel, op_name")
    lines += [f"{ms:8.2f} {n:4d} {cat:<17} {name:<60} {op}" for ms, n, cat, name, op in kernels[:top]]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile_dir", type=pathlib.Path)
    p.add_argument("--hlo", type=pathlib.Path, default=None, help="optimized HLO text of the profiled step")
    p.add_argument("--steps", type=int, default=2, help="steps inside the profile")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    print(report(args.profile_dir, args.hlo, args.steps, args.top))


if __name__ == "__main__":
    main()
