"""Reward hooks whose module misbehaves while a worker process loads it (the parent process loads it fine).

``SWERL_TEST_START`` picks how: "gate:HOST:PORT" connects there, sends the pid and waits for one byte
before the import finishes (a worker that is slow to start, for as long as the test likes); "fail" raises
on import; "exit" kills the process on import. Unset: loads normally.
"""

import multiprocessing
import os
import socket

from swerl_jax.reward import calculate_search_replace_reward

_MODE = os.environ.get("SWERL_TEST_START", "") if multiprocessing.parent_process() is not None else ""
if _MODE.startswith("gate:"):
    _host, _port = _MODE[len("gate:"):].rsplit(":", 1)
    with socket.create_connection((_host, int(_port)), timeout=120) as _conn:
        _conn.sendall(f"{os.getpid()}\n".encode())
        _conn.recv(1)
elif _MODE == "fail":
    raise ImportError("this hook module refuses to load in a worker process")
elif _MODE == "exit":
    os._exit(3)


def score(code_context: dict, oracle_new_content: dict, output: str) -> tuple[float, dict]:
    """The real reward."""
    return calculate_search_replace_reward(code_context, oracle_new_content, output)
