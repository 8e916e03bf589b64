"""The testbed's task generator and hidden-test runner against their peers, on the same inputs in one run.

    python benchmarks/testbed_tasks.py [--tasks 1000] [--run 64] [--repeats 5]

Generation: `testbed.tasks.generate_tasks(n)` against `data.synthetic.synthetic_records(n)` (the demo's 7 bug kinds:
the generator the testbed extends; both build records with difflib patches). Hidden tests: `run_hidden_tests_many`
(one sandbox per batch, a fresh process and folder per task inside it) against one `run_hidden_tests` call per task
(one sandbox each), on the oracle edits of the same `--run` tasks. Prints medians and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    """Run both comparisons and print one line each."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--run", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    from swerl_jax.data.synthetic import synthetic_records
    from swerl_jax.testbed.hidden_tests import run_hidden_tests, run_hidden_tests_many
    from swerl_jax.testbed.tasks import generate_tasks

    ours = _median_s(lambda: generate_tasks(args.tasks, 0), args.repeats)
    peer = _median_s(lambda: synthetic_records(args.tasks, 0), args.repeats)
    print(f"generate {args.tasks} tasks: testbed {ours:.3f} s, synthetic_records {peer:.3f} s, "
          f"ratio {ours / peer:.1f}x (the testbed runs every task's calls on both versions to write its tests)")
    tasks = generate_tasks(args.run, 1)
    items = [(t, t["oracle_new_content"]) for t in tasks]
    t0 = time.perf_counter()
    batched = run_hidden_tests_many(items)
    many = time.perf_counter() - t0
    t0 = time.perf_counter()
    single = [run_hidden_tests(t, c) for t, c in items]
    one = time.perf_counter() - t0
    assert all(o.resolved for o in batched + single), "an oracle edit failed its hidden tests"
    print(f"hidden tests, {args.run} oracle edits: batched {1000 * many / args.run:.1f} ms/task, one sandbox per "
          f"task {1000 * one / args.run:.1f} ms/task, ratio {one / many:.1f}x")


if __name__ == "__main__":
    main()
