"""SWE-bench evaluation: the sandboxed harness (environments, sandbox, patching, grading, report)."""
