"""Executable tasks, below both `agent/` and `eval/`: SWE-bench-shaped instances and their specs (SWE-bench's or
inferred), dated environments, executors, grading; the importers of published task sets, and the generators that make
new tasks from real repositories (injected bugs, reverted PRs), each validated in the sandbox. Training (agent/, rl/,
sft/, train) and evaluation both import this package; it imports neither (tests/test_package_rules.py)."""
