"""Executable tasks from real repositories, without Docker: instances, their specs, environments, executors and
grading, and the generators that make new ones (injected bugs, reverted PRs) and validate them in the sandbox."""
