"""Reward hooks the service tests load in worker processes through ``kind="python:..."``."""

import os
import socket
import time

from swerl_jax.reward import calculate_search_replace_reward


def slow_on_request(code_context: dict, oracle_new_content: dict, output: str) -> tuple[float, dict]:
    """The real reward, except for these outputs: "sleep:S" sleeps S seconds (a pathological item) and
    scores 0.25; "block:HOST:PORT" tells the test it started (connects there, sends its pid) and then hangs;
    "raise" raises; "nan" / "inf" / "-inf" return that reward."""
    if output.startswith("sleep:"):
        time.sleep(float(output.split(":")[1]))
        return 0.25, {}
    if output.startswith("block:"):
        host, port = output[len("block:"):].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=120) as conn:
            conn.sendall(f"{os.getpid()}\n".encode())
        time.sleep(3600)  # until the service (time limit, close) or the test kills this worker
    if output == "raise":
        raise RuntimeError("hook bug")
    if output in ("nan", "inf", "-inf"):
        return float(output), {}
    return calculate_search_replace_reward(code_context, oracle_new_content, output)
