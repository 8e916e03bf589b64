"""The sandbox at training concurrency (issue 58 item 8): how long an agent episode waits before its first turn, and
how long its grading takes, on a real repository (flask, from ../shared/data/repos/pallets__flask.bundle).

    python benchmarks/episode_start.py [--instance pallets__flask-4992] [--reps 5] [--cold]

- cold (with --cold): environment start from nothing: a fresh environment cache and checkout cache, so the
  dependency environment is built (`EnvironmentCache`), the clone fetched history-free, the repository installed;
- warm: `LocalExecutor.prepare` with both caches filled: the history-free checkout copied, the thin venv laid
  over the cached environment, the repository installed in the sandbox (what every `SWEEnv.reset` did);
- reset: `SWEEnv.reset()` without a pool (warm prepare + the episode's workspace), and with a `tasks.pool.WarmPool`
  that prepared the checkouts ahead (the refill runs in the background, during the episode: not counted);
- grading: `LocalExecutor.evaluate` of the gold patch (a fresh checkout, install, patch, tests, verdict).
Wall time is time.perf_counter; CPU time the kernel's rusage of this process and its children (bwrap, pip,
pytest), and the peak RSS of the children. Each figure is the median of --reps (min and max beside it).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import statistics
import tempfile
import time

from swerl_jax.agent.env import SWEEnv
from swerl_jax.tasks import environments, executors
from swerl_jax.tasks.pool import WarmPool, executor_prepare

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def cpu() -> float:
    """CPU seconds of this process and its reaped children."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(fn) -> tuple[float, float, object]:
    """(wall s, cpu s, result) of fn()."""
    c0, t0 = cpu(), time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, cpu() - c0, result


def line(name: str, walls: list[float], cpus: list[float]) -> str:
    """`name: wall median (min-max), cpu median` over the reps."""
    return (f"{name:28s} wall {statistics.median(walls):7.3f} s (min {min(walls):.3f}, max {max(walls):.3f}, n "
            f"{len(walls)})  cpu {statistics.median(cpus):7.3f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instance", default="pallets__flask-4992")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="also build an environment from an empty cache (minutes)")
    args = p.parse_args()
    lite = {r["instance_id"]: r for r in json.loads((DATA / "swebench_lite.json").read_text())}
    instance, repos = lite[args.instance], DATA / "repos"
    out = pathlib.Path(tempfile.mkdtemp(prefix="episode-start-"))
    executor = executors.LocalExecutor(repos, out / "x", environments.EnvironmentCache(), verdict="plugin")

    def prepare(executor_, tag: str) -> dict:
        work, logs = out / "w" / tag, out / "logs" / tag
        work.mkdir(parents=True)
        logs.mkdir(parents=True)
        ready = executor_.prepare(instance, "", logs, work)
        assert "status" not in ready, ready
        return ready

    if args.cold:
        fresh = executors.LocalExecutor(repos, out / "cold", environments.EnvironmentCache(out / "envs"),
                                        verdict="plugin")
        wall, used, _ = timed(lambda: prepare(fresh, "cold"))
        print(line("environment start, cold", [wall], [used]))
    prepare(executor, "fill")  # fills the checkout cache: what a warm start reuses
    rows = {"environment start, warm": ([], []), "episode reset, no pool": ([], []),
            "episode reset, warm pool": ([], []), "grading (gold patch)": ([], [])}
    for rep in range(args.reps):
        wall, used, _ = timed(lambda rep=rep: prepare(executor, f"warm{rep}"))
        rows["environment start, warm"][0].append(wall)
        rows["environment start, warm"][1].append(used)
        env = SWEEnv(instance, repos, out / "env", executor=executor)
        wall, used, _ = timed(env.reset)
        env.close()
        rows["episode reset, no pool"][0].append(wall)
        rows["episode reset, no pool"][1].append(used)
        (out / "grade" / str(rep)).mkdir(parents=True)
        wall, used, result = timed(lambda rep=rep: executor.evaluate(instance, instance["patch"],
                                                                     out / "grade" / str(rep)))
        assert result["status"] == "resolved", result
        rows["grading (gold patch)"][0].append(wall)
        rows["grading (gold patch)"][1].append(used)
    pool = WarmPool(executor_prepare(executor), out / "pool", per_key=2, max_dirs=4)
    pool.fill(instance)
    assert pool.wait_ready(instance), pool.stats
    for _ in range(args.reps):
        env = SWEEnv(instance, repos, out / "env", executor=executor, pool=pool)
        wall, used, _ = timed(env.reset)
        env.close()
        rows["episode reset, warm pool"][0].append(wall)
        rows["episode reset, warm pool"][1].append(used)
        pool.wait_ready(instance)  # the refill overlaps the episode in training
    pool.close()
    assert pool.stats["cold"] == 0, pool.stats  # every pooled reset found a ready checkout
    for name, (walls, cpus) in rows.items():
        print(line(name, walls, cpus))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"pool {pool.stats}; peak child RSS {peak:.0f} MiB; instance {args.instance}; work in {out}")


if __name__ == "__main__":
    main()
