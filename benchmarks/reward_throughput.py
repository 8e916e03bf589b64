"""Reward throughput: a straightforward stdlib-difflib reward vs ours vs the 2-worker service, same inputs.

Inputs: the 17 real PR records (../shared/data/pr_records_requests_flask.jsonl), 16 rollouts per record as a
GRPO group would have (gold edit, mutated edits, partial edits, an extra file). The three run in turn for
``--rounds`` rounds (so load from other jobs hits all alike); each one's best round is reported, and every
round asserts that all three give the same rewards. Run:
    .venv/bin/python benchmarks/reward_throughput.py [--groups-repeat 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import pathlib
import re
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from swerl_jax.answer import SEARCH_REPLACE_REGEX  # noqa: E402
from swerl_jax.reward import calculate_search_replace_reward  # noqa: E402
from swerl_jax.reward.service import RewardService  # noqa: E402
from tests.reward.helpers import answer, gold_block  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "pr_records_requests_flask.jsonl"


def stdlib_reward(code_context: dict, oracle_new_content: dict, output: str) -> float:
    """The reward written the plain way: re, str.replace, difflib, everything recomputed per rollout."""
    tags = ("<think>", "</think>", "<solution>", "</solution>")
    if any(output.count(t) != 1 for t in tags):
        return -1.0
    if not output.split("<think>")[1].split("</think>")[0].strip():
        return -1.0
    answer_text = output.split("<solution>")[1].split("</solution>")[0].strip()
    edits: dict[str, list] = {}
    for path, search, replace in re.findall(SEARCH_REPLACE_REGEX, answer_text):
        edits.setdefault(path, []).append((search, replace))
    if not edits:
        return -1.0
    new = {}
    for path, blocks in edits.items():
        text = "\n" + code_context.get(path, "")
        for search, replace in blocks:
            if search == replace or "\n" + search not in text:
                return -1.0
            text = text.replace("\n" + search, "\n" + replace)
        new[path] = text[1:]

    def diffs(contents: dict) -> dict:
        out = {}
        for path, content in contents.items():
            lines = list(difflib.unified_diff(code_context.get(path, "").splitlines(), content.splitlines(),
                                              "old", "new", lineterm="", n=3))
            if len(lines) > 2:
                out[path] = "\n".join(lines[2:])
        return out

    pred, oracle = diffs(new), diffs(oracle_new_content)
    paths = set(oracle).union(set(pred))
    if not paths:
        return 1.0
    sims = []
    for path in paths:
        a, b = pred.get(path, ""), oracle.get(path, "")
        sims.append(0.0 if not a or not b else difflib.SequenceMatcher(None, a, b, autojunk=False).ratio())
    return sum(sims) / len(sims)


def build_items(repeat: int) -> list[dict]:
    """16 rollouts per record: gold, mutated, partial and extra-file edits (groups kept together)."""
    items = []
    records = [json.loads(line) for line in DATA.open()]
    for _ in range(repeat):
        for rec in records:
            ctx, oracle = rec["code_context"], rec["oracle_new_content"]
            changed = [(p, new) for p, new in oracle.items() if ctx[p] != new]
            path, search, replace = gold_block(ctx[changed[0][0]], changed[0][1], changed[0][0])
            lines = replace.split("\n")
            outputs = [answer([(path, search, replace)])]
            for k in range(1, 12):  # mutated: a changed or extra line at varying places
                mutated = lines[:]
                mutated.insert(k * len(lines) // 12, f"    value = {k}  # mutated")
                outputs.append(answer([(path, search, "\n".join(mutated))]))
            part = "\n".join(lines[:1] + search.split("\n")[1:])
            outputs.append(answer([(path, search, part if part != search else part + "\n")]))
            outputs.append(answer([(path, search, replace), ("docs/extra.py", "", "print(1)")]))
            outputs.append(answer([(path, search, replace)], thought=""))  # format error
            outputs.append("no tags at all")
            items += [{"code_context": ctx, "oracle_new_content": oracle, "output": o} for o in outputs]
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--groups-repeat", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    items = build_items(args.groups_repeat)
    load = os.getloadavg()
    print(f"{len(items)} rollouts over {len(items) // 16} groups; {args.rounds} rounds; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")

    times: dict[str, list[float]] = {"base": [], "ours": [], "service": []}
    with RewardService(num_workers=2, timeout_s=60) as service:
        service.submit(items[:16])[-1].result()  # warm: workers started, imports done
        for _ in range(args.rounds):
            start = time.perf_counter()
            base = [stdlib_reward(it["code_context"], it["oracle_new_content"], it["output"]) for it in items]
            times["base"].append(time.perf_counter() - start)

            start = time.perf_counter()
            ours = [calculate_search_replace_reward(it["code_context"], it["oracle_new_content"], it["output"])[0]
                    for it in items]
            times["ours"].append(time.perf_counter() - start)
            assert ours == base, "our reward differs from the stdlib implementation"

            start = time.perf_counter()
            served = [f.result()[0] for f in service.submit(items)]
            times["service"].append(time.perf_counter() - start)
            assert served == base, "service rewards differ"

    n = len(items)
    best = {k: min(v) for k, v in times.items()}
    print(f"stdlib difflib, 1 process : {n / best['base']:10.1f} items/s  (best {best['base']:.3f} s)")
    print(f"swerl_jax function        : {n / best['ours']:10.1f} items/s  (best {best['ours']:.3f} s)  "
          f"{best['base'] / best['ours']:6.1f}x")
    print(f"swerl_jax service, 2 procs: {n / best['service']:10.1f} items/s  (best {best['service']:.3f} s)  "
          f"{best['base'] / best['service']:6.1f}x")
    for name, values in times.items():
        print(f"  {name:8s} rounds: {', '.join(f'{n / t:.1f}' for t in values)} items/s")
    load = os.getloadavg()
    print(f"mean reward {sum(base) / n:.4f}; format errors {sum(r == -1.0 for r in base)}; "
          f"load average after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
