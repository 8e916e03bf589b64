"""Multi-turn generation for agent episodes: K/V kept between turns (`sampler.sessions.KeptKV`) vs re-prefilling
the whole conversation every turn (`agent.rollout.Reprefill` over the same `SamplingEngine`), and transformers
`generate` re-prefilling every turn (the peer), SmolLM2-135M, CPU, fp32, the same token ids on every side.

The episodes are GRPO-shaped: `--prompts` distinct chat prompts of `--prompt-tokens` tokens, `--samples` episodes
each; every turn the model writes exactly `--new-tokens` tokens (no stop token, so every side does the same work),
then an "observation" of `--obs-tokens` tokens of real source text (the same ids for an episode and turn on every
side, as a tool's output would be) is appended, for `--turns` turns. tokens/s = generated tokens / wall time of
the whole episode batch (all turns, prefills included). Before timing each side runs the same episodes once
(compiles). "same outputs": the episodes whose every turn's tokens are identical between the two sides of ours
(same seeds; sampled at temperature 1, or greedy with `--greedy`, which transformers then matches too).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/agent_multiturn.py
    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/agent_multiturn.py --turns 4 --prompt-tokens 256 --greedy
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.sampler_measure import build_prompts  # noqa: E402
from swerl_jax.agent.rollout import Reprefill  # noqa: E402
from swerl_jax.model.convert import load_hf  # noqa: E402
from swerl_jax.model.smollm2 import smollm2_hf_dir  # noqa: E402
from swerl_jax.rl.collect import InlineSampler  # noqa: E402
from swerl_jax.sampler.engine import SamplingEngine, SamplingParams  # noqa: E402
from swerl_jax.sampler.sessions import KeptKV  # noqa: E402
from swerl_jax.tokenizer import load_tokenizer  # noqa: E402


def observations(tokenizer, episodes: int, turns: int, length: int) -> list[list[np.ndarray]]:
    """[episode][turn] ids: slices of real source text (this repository's agent tools), different per episode."""
    text = (REPO / "swerl_jax" / "agent" / "tools.py").read_text()
    ids = np.asarray(tokenizer.encode(text, add_special_tokens=False), np.int32)
    return [[ids[(e * 97 + t * 31) % (ids.size - length):][:length] for t in range(turns)] for e in range(episodes)]


def run_ours(gen, prompts, samples, obs, turns, sampling) -> tuple[list[list[list[int]]], int]:
    """Every episode's turns through a TurnGenerator: ([episode][turn] tokens, generated tokens)."""
    firsts = gen.first_turn([np.asarray(p, np.int32) for p in prompts], samples, sampling, 7, 0)
    transcript = [np.concatenate([np.asarray(p, np.int32), c.tokens]) for p, g in zip(prompts, firsts) for c in g]
    out = [[c.tokens.tolist()] for g in firsts for c in g]
    for t in range(1, turns):
        contexts = [np.concatenate([x, obs[e][t]]) for e, x in enumerate(transcript)]
        got = gen.next_turn(contexts, [sampling.max_new_tokens] * len(contexts), sampling, 700 + t, 0)
        transcript = [np.concatenate([c, g.tokens]) for c, g in zip(contexts, got)]
        for e, g in enumerate(got):
            out[e].append(g.tokens.tolist())
    return out, sum(len(x) for e in out for x in e)


def run_torch(model, prompts, samples, obs, turns, new_tokens, greedy, pad_id) -> tuple[list, int]:
    """transformers: every turn, `generate` on the left-padded whole conversations."""
    transcript = [list(p) for p in prompts for _ in range(samples)]
    out = [[] for _ in transcript]
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    for t in range(turns):
        if t:
            transcript = [x + obs[e][t].tolist() for e, x in enumerate(transcript)]
        width = max(len(x) for x in transcript)
        ids = torch.tensor([[pad_id] * (width - len(x)) + x for x in transcript])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in transcript])
        with torch.no_grad():
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, pad_token_id=pad_id, **sampling)
        for e, row in enumerate(gen[:, width:].tolist()):
            transcript[e] += row
            out[e].append(row)
    return out, sum(len(x) for e in out for x in e)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--obs-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    args = ap.parse_args()

    hf_dir = smollm2_hf_dir()
    tokenizer = load_tokenizer(hf_dir)
    config, params = load_hf(hf_dir)
    prompts = build_prompts(tokenizer, args.prompts, args.prompt_tokens)
    episodes = args.prompts * args.samples
    obs = observations(tokenizer, episodes, args.turns, args.obs_tokens)
    context = args.prompt_tokens + args.turns * (args.new_tokens + args.obs_tokens)
    engine = SamplingEngine(config, params, max_batch=max(16, episodes), max_prompt_len=context,
                            max_new_tokens=args.new_tokens, eos_token_ids=())
    sampling = SamplingParams(temperature=0.0 if args.greedy else 1.0, max_new_tokens=args.new_tokens,
                              stop_token_ids=())
    print(f"SmolLM2-135M fp32 CPU ({os.cpu_count()} cores): {args.prompts} prompts x {args.samples} episodes, "
          f"{args.prompt_tokens}-token prompts, {args.turns} turns x ({args.new_tokens} new + {args.obs_tokens} "
          f"observation tokens), {'greedy' if args.greedy else 'temperature 1'}; context up to {context}")
    results = {}
    for name, make in (("kept K/V", lambda: KeptKV(engine, max_context=context)),
                       ("re-prefill", lambda: Reprefill(InlineSampler(engine)))):
        run_ours(make(), prompts, args.samples, obs, args.turns, sampling)  # compile every shape once
        gen = make()
        t0 = time.perf_counter()
        out, n = run_ours(gen, prompts, args.samples, obs, args.turns, sampling)
        wall = time.perf_counter() - t0
        results[name] = (out, n, wall, getattr(gen, "prefilled_tokens", None))
        print(f"  ours, {name:10s}: {n / wall:8.1f} tokens/s ({n} tokens in {wall:6.2f} s)"
              + (f", {gen.prefilled_tokens} tokens prefilled, {gen.compactions} compactions"
                 if name == "kept K/V" else ""))
    kept, re = results["kept K/V"], results["re-prefill"]
    same = sum(a == b for a, b in zip(kept[0], re[0]))
    first = min((t for a, b in zip(kept[0], re[0]) for t in range(len(a)) if a[t] != b[t]), default="none")
    print(f"  kept / re-prefill: {re[2] / kept[2]:.2f}x; same outputs in {same}/{episodes} episodes "
          f"(first differing turn: {first})")
    if not args.skip_torch:
        import transformers

        torch.manual_seed(0)
        torch.set_num_threads(os.cpu_count() or 1)
        model = transformers.LlamaForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        t0 = time.perf_counter()
        out, n = run_torch(model, prompts, args.samples, obs, args.turns, args.new_tokens, args.greedy, pad)
        wall = time.perf_counter() - t0
        print(f"  transformers, re-prefill: {n / wall:8.1f} tokens/s ({n} tokens in {wall:6.2f} s); ours kept / "
              f"transformers: {wall / kept[2]:.2f}x"
              + (f"; greedy tokens equal to ours in {sum(a == b for a, b in zip(out, kept[0]))}/{episodes} episodes"
                 if args.greedy else ""))


if __name__ == "__main__":
    main()
