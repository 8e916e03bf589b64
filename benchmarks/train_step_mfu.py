"""Train-step throughput and MFU: our sharded JAX step vs a transformers (PyTorch) step on the same batch.

Both sides run one full optimizer step (forward, backward, AdamW) of the same Llama shape on the same
random tokens; the script prints tokens/s, achieved TFLOP/s, MFU against the mesh's peak, and the ratio.

    # H100 (the issue's target: Llama-3.2-1B shape, seq 4096, bf16, cuDNN attention; goal >= 50% MFU):
    python benchmarks/train_step_mfu.py --model=llama3.2-1b --seq=4096 --batch=8 --dtype=bfloat16 \
        --attention=cudnn --remat=dots_with_no_batch_dims_saveable --mesh=h100x1
    # the same with a profile split into matmuls / attention / head / Adam / idle (benchmarks/profile_split.py):
    XLA_FLAGS="--xla_gpu_enable_command_buffer= --xla_dump_to=/tmp/dump --xla_dump_hlo_as_text \
        --xla_dump_hlo_module_re=jit_step" python benchmarks/train_step_mfu.py ... --no-peer --profile /tmp/prof
    # CPU (what fits a shared 2-core machine):
    JAX_PLATFORMS=cpu python benchmarks/train_step_mfu.py --model=smollm2-135m --seq=512 --batch=1 --mesh=cpu

FLOPs per token: 6 N (N = parameters taking part in matmuls: all but the input embedding lookup, the head
counted once even when tied) + 12 L H D T for attention scores and values (PaLM's accounting, no causal
discount). MFU = FLOPs per token x tokens/s / (devices x peak bf16 FLOP/s of the mesh). Tokens count padding:
the batch is full-length. The "causal MFU" column counts attention as a causal kernel does (6 L H D T, half),
MaxText's convention; the two differ by the attention share.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import profile_split  # noqa: E402
from experiments import base  # noqa: E402
from swerl_jax import sharding  # noqa: E402
from swerl_jax.meshes import get_mesh_spec  # noqa: E402
from swerl_jax.model.config import LlamaConfig, get_model_config  # noqa: E402
from swerl_jax.model.llama import token_logprobs  # noqa: E402
from swerl_jax.train_step import TrainState, init_train_state, make_train_step, state_shardings  # noqa: E402


def flops_per_token(m: LlamaConfig, seq: int, causal: bool = False) -> float:
    """Training FLOPs per token: 6 N for the matmul parameters plus 12 L H D T for attention (6 L H D T when
    `causal`: the half of the score matrix a causal kernel computes)."""
    n = m.num_params() - m.vocab_size * m.hidden_size  # the lookup is no matmul...
    n += m.vocab_size * m.hidden_size if m.tie_word_embeddings else 0  # ...but a tied head is one
    return 6 * n + (6 if causal else 12) * m.num_layers * m.num_heads * m.head_size * seq


def jax_step(m: LlamaConfig, args: argparse.Namespace, tokens: np.ndarray) -> tuple[float, float]:
    """Seconds per step (median of timed steps) and the last loss of our sharded step."""
    c = base.get_config()
    c.mesh.name = args.mesh
    mesh, rules = sharding.create_mesh(c), sharding.logical_axis_rules(c)
    sharding.validate_mesh(c, m, jax.device_count(), global_batch=tokens.shape[0])
    opt = optax.adamw(1e-4)
    params = sharding.init_params_sharded(m, mesh, jax.random.key(0), rules)
    shardings = state_shardings(opt, sharding.param_shardings(m, mesh, rules), params, mesh)
    state: TrainState = init_train_state(params, opt, shardings)
    del params

    def loss_fn(p, batch):
        logp = token_logprobs(m, p, batch["tokens"], batch["mask"], chunk_size=args.chunk)
        return -jnp.mean(logp[:, :-1]), {}

    batch = sharding.shard_batch({"tokens": tokens, "mask": np.ones_like(tokens, bool)}, mesh, rules)
    step = make_train_step(loss_fn, opt, mesh, shardings, sharding.batch_shardings(mesh, batch, rules), rules)
    times, loss = [], 0.0
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        state, metrics = step(state, batch)
        loss = float(metrics["loss"])  # blocks until the step is done
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    if device_peak() is not None:
        print(f"peak device memory after the timed steps: {device_peak() / 2**30:.1f} GiB")
    if args.profile:
        with jax.profiler.trace(str(args.profile), create_perfetto_trace=True):
            for _ in range(args.profile_steps):
                state, metrics = step(state, batch)
                float(metrics["loss"])
        hlo = sorted(pathlib.Path(args.hlo_dump).glob("*jit_step*after_optimizations.txt")) if args.hlo_dump else []
        print(profile_split.report(args.profile, hlo[-1] if hlo else None, args.profile_steps))
    return float(np.median(times)), loss


def device_peak() -> int | None:
    """Peak bytes in use on the first device so far (None where the backend does not say)."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def torch_step(m: LlamaConfig, args: argparse.Namespace, tokens: np.ndarray) -> tuple[float, float]:
    """The peer: transformers' LlamaForCausalLM, same shape and tokens, AdamW, eager PyTorch."""
    import torch
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    hf = HFConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
                  num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                  num_key_value_heads=m.num_kv_heads, head_dim=m.head_size, rope_theta=m.rope_theta,
                  tie_word_embeddings=m.tie_word_embeddings, max_position_embeddings=m.max_position_embeddings)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model = LlamaForCausalLM(hf).to(device=device, dtype=dtype)
    if args.remat != "none":  # the fair peer of our remat: recompute each layer in the backward pass
        model.gradient_checkpointing_enable()
    if args.attention == "cudnn":
        model.config._attn_implementation = "sdpa"  # torch's sdpa picks its flash/cuDNN kernel on CUDA
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.as_tensor(tokens, dtype=torch.long, device=device)
    times, loss = [], 0.0
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = float(out.loss.detach())
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    return float(np.median(times)), loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--remat", default="none")
    p.add_argument("--attention", default=None, help="jax.nn.dot_product_attention implementation (cudnn)")
    p.add_argument("--mesh", default="cpu", help="named mesh from swerl_jax.meshes (for its peak FLOP/s)")
    p.add_argument("--chunk", type=int, default=1024, help="token_logprobs vocabulary chunk")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--param-dtype", default="float32", choices=["float32", "bfloat16"],
                   help="master weights (and so Adam moments): bfloat16 halves the state, e.g. 8B on one GPU")
    p.add_argument("--profile", type=pathlib.Path, default=None,
                   help="after timing, trace --profile-steps steps into this folder and print the split")
    p.add_argument("--profile-steps", type=int, default=2)
    p.add_argument("--hlo-dump", default=None, help="the --xla_dump_to folder (maps kernels to op names)")
    p.add_argument("--no-peer", action="store_true", help="skip the PyTorch step")
    p.add_argument("--peer-only", action="store_true",
                   help="only the PyTorch step (on a GPU, run each side in its own process: JAX holds its memory)")
    args = p.parse_args()

    m = get_model_config(args.model, param_dtype=args.param_dtype, dtype=args.dtype, remat=args.remat,
                         attention_impl=args.attention)
    tokens = np.random.default_rng(0).integers(0, m.vocab_size, (args.batch, args.seq), dtype=np.int32)
    spec = get_mesh_spec(args.mesh)
    fpt = flops_per_token(m, args.seq)
    n_tok = args.batch * args.seq
    peak = spec.peak_bf16_flops * jax.device_count()
    print(f"{args.model} ({m.num_params() / 1e6:.0f}M params), batch {args.batch} x seq {args.seq}, {args.dtype}, "
          f"remat={args.remat}, attention={args.attention or 'xla'}; {jax.device_count()} x "
          f"{jax.devices()[0].device_kind}; {fpt / 1e9:.2f} GFLOP/token")
    results = {} if args.peer_only else {"ours (jax)": jax_step(m, args, tokens)}
    if not args.no_peer:
        results["transformers (torch)"] = torch_step(m, args, tokens)
    causal_fpt = flops_per_token(m, args.seq, causal=True)
    for name, (sec, loss) in results.items():
        achieved = fpt * n_tok / sec
        mfu = (f"MFU {achieved / peak:.1%} (causal MFU {causal_fpt * n_tok / sec / peak:.1%})"
               if spec.device_kind != "cpu" else "MFU n/a (no CPU peak)")
        print(f"{name:<22} {sec * 1e3:9.1f} ms/step  {n_tok / sec:10.1f} tokens/s  {achieved / 1e12:7.3f} TFLOP/s  "
              f"{mfu}  loss {loss:.4f}")
    if len(results) == 2:
        (a, _), (b, _) = results.values()
        print(f"ratio (torch time / jax time): {b / a:.2f}x")


if __name__ == "__main__":
    main()
