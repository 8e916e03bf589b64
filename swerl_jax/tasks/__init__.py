"""Executable tasks, below both `agent/` and `eval/`: SWE-bench-shaped instances and their specs, dated
environments, executors, grading; the importers of published task sets (and the generators). Training (agent/,
rl/, sft/, train) and evaluation both import this package; it imports neither (tests/test_package_rules.py)."""
