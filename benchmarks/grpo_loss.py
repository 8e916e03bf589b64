"""GRPO loss (forward + gradient w.r.t. the log-probs): our jitted `grpo_loss` vs a PyTorch eager peer.

    .venv/bin/python benchmarks/grpo_loss.py [--rows 512] [--tokens 2048] [--repeats 5]

The peer is the same objective written independently in PyTorch the way verl/rLLM write it (ratio,
clipped surrogate with eps_low/eps_high and dual clip, k3 KL, entropy bonus, compact filtering, each loss
aggregation mode). Every mode runs on the same random inputs; loss and gradient must agree (fp32, rtol 1e-4),
so the run doubles as a cross-implementation check of the formulas. Times are the best of `--repeats`
after one warm-up call (compilation excluded).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from swerl_jax.rl.objectives import LOSS_AGGREGATORS, GRPOLossConfig, grpo_loss  # noqa: E402


def torch_grpo(logp, old, ref, adv, mask, ent, trunc, cfg: GRPOLossConfig) -> torch.Tensor:
    """The peer: the GRPO objective in plain PyTorch ops."""
    mask = mask * (~trunc).float()[:, None] if cfg.compact_filtering else mask
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    a = adv[:, None]
    pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high))
    if cfg.dual_clip:
        pg = torch.where(a < 0, torch.minimum(pg, -a * cfg.dual_clip), pg)
    d = ref - logp
    per_token = pg + cfg.kl_coef * (torch.exp(d) - d - 1) - cfg.entropy_coef * ent
    tok = per_token * mask
    active = (mask.sum(-1) > 0).float()
    if cfg.loss_agg == "token-mean":
        return tok.sum() / mask.sum().clamp(min=1)
    if cfg.loss_agg == "seq-mean-token-mean":
        per_seq = tok.sum(-1) / mask.sum(-1).clamp(min=1)
    elif cfg.loss_agg == "seq-mean-token-sum":
        per_seq = tok.sum(-1)
    else:
        per_seq = tok.sum(-1) / cfg.loss_norm
    return (per_seq * active).sum() / active.sum().clamp(min=1)


def inputs(rows: int, tokens: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, tokens + 1, rows)
    f = lambda *s: rng.normal(size=s).astype(np.float32)
    logp = -np.abs(f(rows, tokens)) - 0.1
    return {"logp": logp, "old": logp + 0.2 * f(rows, tokens), "ref": logp + 0.1 * f(rows, tokens),
            "adv": f(rows), "mask": (np.arange(tokens) < lengths[:, None]).astype(np.float32),
            "ent": np.abs(f(rows, tokens)), "trunc": lengths == tokens}


def best(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_mode(mode: str, x: dict[str, np.ndarray], repeats: int) -> tuple[float, float, float]:
    """(ours s, peer s, max |grad diff|) for one aggregation mode, after checking both agree."""
    tokens = x["mask"].shape[1]
    cfg = GRPOLossConfig(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip=3.0, kl_coef=0.04, kl_estimator="k3",
                         entropy_coef=0.01, loss_agg=mode, loss_norm=float(tokens), compact_filtering=True,
                         seq_mean_rows="active")
    f = jax.jit(jax.value_and_grad(lambda lp, b: grpo_loss(lp, b["old"], b["ref"], b["adv"], b["mask"], cfg,
                                                           entropy=b["ent"], truncated=b["trunc"])[0]))
    jx = {k: jnp.asarray(v) for k, v in x.items()}
    tx = {k: torch.from_numpy(v) for k, v in x.items()}

    def ours():
        return jax.block_until_ready(f(jx["logp"], jx))

    def peer():
        lp = tx["logp"].clone().requires_grad_(True)
        loss = torch_grpo(lp, tx["old"], tx["ref"], tx["adv"], tx["mask"], tx["ent"], tx["trunc"], cfg)
        loss.backward()
        return loss.detach(), lp.grad

    (l_ours, g_ours), (l_peer, g_peer) = ours(), peer()
    np.testing.assert_allclose(float(l_ours), float(l_peer), rtol=1e-4, atol=1e-7)
    scale = float(np.abs(g_peer.numpy()).max())
    np.testing.assert_allclose(np.asarray(g_ours), g_peer.numpy(), rtol=1e-4, atol=1e-5 * scale)
    diff = float(np.abs(np.asarray(g_ours) - g_peer.numpy()).max())
    return best(ours, repeats), best(peer, repeats), diff


def main() -> None:
    """Each aggregation mode: check agreement, time both, print a table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    x = inputs(args.rows, args.tokens)
    print(f"{args.rows} rows x {args.tokens} tokens, fp32, torch threads {torch.get_num_threads()}")
    print(f"{'loss_agg':26s}{'ours (ms)':>10s}{'torch (ms)':>11s}{'torch/ours':>11s}  max |grad diff|")
    for mode in sorted(LOSS_AGGREGATORS):
        t_ours, t_peer, diff = run_mode(mode, x, args.repeats)
        print(f"{mode:26s}{t_ours * 1e3:10.2f}{t_peer * 1e3:11.2f}{t_peer / t_ours:10.1f}x  {diff:.2e}")


if __name__ == "__main__":
    main()
