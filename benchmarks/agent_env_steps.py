"""Agent environment steps/s: the tools of `swerl_jax.agent` on real flask checkouts, 1 vs 2 workers, against the
same commands run by plain `subprocess` without the sandbox (the peer: what the isolation costs).

Each worker owns a checkout of pallets/flask (from ../shared/data/repos) and runs a fixed script of agent steps
in a loop: view a file, search the tree, a bash command (`python -c` that imports nothing heavy), a git status,
and a str_replace + undo pair. Steps/s = all workers' steps / wall time.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/agent_env_steps.py --rounds 10
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from swerl_jax.agent.actions import Action  # noqa: E402
from swerl_jax.agent.tools import Workspace  # noqa: E402
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits  # noqa: E402

BUNDLE = REPO.parent / "shared" / "data" / "repos" / "pallets__flask.bundle"
COMMIT = "d8c37f43724cd9fb0870f77877b7c4c7e38a19e0"
SCRIPT = [Action("file_editor", {"command": "view", "path": "src/flask/blueprints.py", "view_range": "170 200"}),
          Action("search", {"search_term": "def add_url_rule", "path": "src"}),
          Action("execute_bash", {"command": "python3 -c 'import ast, sys; print(sys.version_info[:2])'"}),
          Action("execute_bash", {"command": "git status --short | wc -l"}),
          Action("file_editor", {"command": "str_replace", "path": "src/flask/blueprints.py",
                                 "old_str": "        self.name = name\n",
                                 "new_str": "        self.name = str(name)\n"}),
          Action("file_editor", {"command": "undo_edit", "path": "src/flask/blueprints.py"})]
PEER = {"search": lambda a: ["grep", "-rnIF", "--exclude-dir=.git", "-e", a.params["search_term"], a.params["path"]],
        "execute_bash": lambda a: ["bash", "-c", a.params["command"]]}


def checkout(root: pathlib.Path) -> pathlib.Path:
    """A fresh flask checkout at the benchmark's commit under `root`."""
    subprocess.run(["git", "clone", "-q", str(BUNDLE), str(root / "repo")], check=True)
    subprocess.run(["git", "-C", str(root / "repo"), "-c", "advice.detachedHead=false", "checkout", "-q", COMMIT],
                   check=True)
    return root / "repo"


def run_ours(root: pathlib.Path, rounds: int) -> int:
    """The script `rounds` times through the sandboxed tools; returns the number of steps."""
    limits = SandboxLimits(memory_bytes=2 << 30, cpu_seconds=60, processes=128, timeout_s=60)
    ws = Workspace(root / "repo", root, Sandbox(limits=limits), step_limits=limits)
    for _ in range(rounds):
        for action in SCRIPT:
            ws.call(action)
    return rounds * len(SCRIPT)


def run_peer(root: pathlib.Path, rounds: int) -> int:
    """The same steps without the sandbox: editor calls in Python, commands by plain subprocess."""
    limits = SandboxLimits(timeout_s=60)
    ws = Workspace(root / "repo", root, Sandbox(limits=limits), step_limits=limits)  # only its editor is used
    for _ in range(rounds):
        for action in SCRIPT:
            if action.function in PEER:
                subprocess.run(PEER[action.function](action), cwd=root / "repo", capture_output=True, timeout=60)
            else:
                ws.call(action)
    return rounds * len(SCRIPT)


def measure(fn, roots: list[pathlib.Path], rounds: int) -> float:
    """Steps/s of `fn` over one worker per root."""
    start = time.perf_counter()
    with ThreadPoolExecutor(len(roots)) as pool:
        steps = sum(pool.map(lambda r: fn(r, rounds), roots))
    return steps / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="times each worker runs the 6-step script")
    args = ap.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bubblewrap is not installed (make install-dev)")
    with tempfile.TemporaryDirectory() as tmp:
        roots = [pathlib.Path(tmp) / f"w{i}" for i in range(2)]
        for r in roots:
            r.mkdir()
            checkout(r)
        print(f"{os.cpu_count()} cpus, load average at start {os.getloadavg()}; {len(SCRIPT)} steps per round, "
              f"{args.rounds} rounds per worker", flush=True)
        print("| workers | ours (sandboxed) steps/s | peer (plain subprocess) steps/s | peer / ours |")
        print("| ---: | ---: | ---: | ---: |")
        for workers in (1, 2):
            ours = measure(run_ours, roots[:workers], args.rounds)
            peer = measure(run_peer, roots[:workers], args.rounds)
            print(f"| {workers} | {ours:.1f} | {peer:.1f} | {peer / ours:.2f}x |", flush=True)
        print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
