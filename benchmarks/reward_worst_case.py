"""The reward's worst cases: seconds for one call on repetitive files and on megabyte padding.

The reward has no time bound of its own (the reward service's ``reward.timeout_s`` is the bound). Cases:
``repetitive N``: a file of N lines drawn from 35 distinct lines, the oracle changes one line and the
prediction two others (every line is popular for the release's line diff, so both diffs rewrite the whole
file and their character similarity is quadratic); ``pad-line N`` / ``pad-lines N`` / ``pad-varied N``:
a real flask record's gold edit plus one N-character line, N ``x = 1`` lines, N varied lines;
``pad-copies N``: plus N copies of the file itself. Run:
    .venv/bin/python benchmarks/reward_worst_case.py repetitive 500 1000 2000 4000
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from swerl_jax.reward import calculate_search_replace_reward  # noqa: E402
from tests.reward.helpers import answer, gold_block  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "pr_records_requests_flask.jsonl"


def case(kind: str, n: int) -> tuple[dict, dict, str]:
    """(code_context, oracle_new_content, output) of one worst case of size n."""
    if kind == "repetitive":
        lines = [f"    v{i % 7} = f(v{i % 5})" for i in range(n)]
        oracle, pred = lines.copy(), lines.copy()
        oracle[n // 3] = "    changed = 1"
        pred[2 * n // 3], pred[n // 4] = "    other = 2", "    third = 3"
        old = "\n".join(lines) + "\n"
        edit = gold_block(old, "\n".join(pred) + "\n", "r.py")
        return {"r.py": old}, {"r.py": "\n".join(oracle) + "\n"}, answer([edit])
    if not DATA.exists():
        raise SystemExit(f"{DATA} is missing: the padding cases need the real PR records")
    record = json.loads(DATA.read_text().splitlines()[0])
    ctx, oracle = record["code_context"], record["oracle_new_content"]
    path = next(iter(oracle))
    p, search, replace = gold_block(ctx[path], oracle[path], path)
    padding = {"pad-line": "\n# " + "x" * n, "pad-lines": "\nx = 1" * n,
               "pad-varied": "".join(f"\nx{i % 97} = {i % 89}" for i in range(n)),
               "pad-copies": ("\n" + ctx[path]) * n}[kind]
    return ctx, oracle, answer([(p, search, replace + padding)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["repetitive", "pad-line", "pad-lines", "pad-varied", "pad-copies"])
    parser.add_argument("sizes", type=int, nargs="+")
    args = parser.parse_args()
    for n in args.sizes:
        ctx, oracle, output = case(args.kind, n)
        start = time.perf_counter()
        reward, info = calculate_search_replace_reward(ctx, oracle, output)
        print(f"{args.kind} {n}: {time.perf_counter() - start:.2f} s (reward {reward!r}, "
              f"reason {info.get('reason')})", flush=True)


if __name__ == "__main__":
    main()
