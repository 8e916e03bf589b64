"""Agentic SWE environments (DeepSWE / R2E-Gym style) on the evaluation harness's sandbox: tools, actions, env."""
