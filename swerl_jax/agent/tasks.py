"""Which tasks an agent run trains and evaluates on, and the environments over them.

    tasks = AgentTasks.from_config(config, workdir)     # synthetic (materialised under workdir) or SWE-bench
    env = tasks.env(tasks.instances[i], config)          # a fresh SWEEnv for one episode

Synthetic tasks (`agent.instances` empty) are `data.synthetic_num_records` bug fixes with hidden unit tests
(`agent.synthetic`), seeded by the run's seed; held-out ones use seed + `eval.heldout_seed`, so they are never the
training tasks. SWE-bench instances come from `agent.instances` with their clones in `agent.repos`, run by the
harness's `LocalExecutor` (cached environments, the sandbox). `data.rl_num_records` keeps the first N. Held-out
SWE-bench-shaped instances (a generated set's heldout.jsonl: `python -m swerl_jax.tasks generate`) come from
`agent.eval_instances`, in the same `agent.repos`, the first `agent.eval_tasks` of them.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.synthetic import SyntheticTasks
from swerl_jax.sandbox.bwrap import SandboxLimits


@dataclasses.dataclass
class AgentTasks:
    """A list of SWE-bench-shaped instances and the executor that sets them up and grades them."""

    instances: list[dict]
    executor: Any
    repos_dir: pathlib.Path
    work_root: pathlib.Path

    @classmethod
    def from_config(cls, config: Any, workdir: str | pathlib.Path, heldout: bool = False) -> AgentTasks:
        """The run's training tasks (or, `heldout`, the first `agent.eval_tasks` of `agent.eval_instances`, else
        that many synthetic tasks it never trains on)."""
        workdir = pathlib.Path(workdir)
        a, d = config.agent, config.data
        work_root = workdir / "episodes" / ("eval" if heldout else "train")
        named = str(a.eval_instances) if heldout else str(a.instances)
        if named:
            from swerl_jax.data.swebench import load_instances
            from swerl_jax.tasks.environments import EnvironmentCache
            from swerl_jax.tasks.executors import LocalExecutor

            instances = load_instances(named)
            keep = int(a.eval_tasks) if heldout else int(d.rl_num_records)
            if keep > 0:
                instances = instances[:keep]
            repos = pathlib.Path(str(a.repos))
            executor = LocalExecutor(repos, work_root, EnvironmentCache(), _limits(config), verdict="plugin")
            return cls(instances, executor, repos, work_root)
        repos = tuple(r for r in str(d.synthetic_repos).split(",") if r) or ("acme/widgets",)
        if heldout:
            n, seed = int(a.eval_tasks), int(config.seed) + int(config.eval.heldout_seed)
        else:
            n, seed = int(d.synthetic_num_records), int(config.seed)
        synthetic = SyntheticTasks(workdir / "tasks" / f"seed{seed}", n, seed, repos)
        instances = synthetic.instances
        if int(d.rl_num_records) > 0 and not heldout:
            instances = instances[:int(d.rl_num_records)]
        return cls(instances, synthetic.executor(work_root / "grade"), synthetic.root / "repos", work_root)

    def env(self, instance: dict, config: Any) -> SWEEnv:
        """A fresh environment for one episode of `instance` under the config's limits."""
        a = config.agent
        return SWEEnv(instance, self.repos_dir, self.work_root, executor=self.executor, reward=str(a.reward),
                      max_turns=int(a.max_turns), timeout_s=float(a.timeout_s), step_timeout_s=float(a.step_timeout_s),
                      limits=_limits(config), compact=bool(a.compact_prompt),
                      test_infra_unresolved=bool(a.test_infra_unresolved))


def _limits(config: Any) -> SandboxLimits:
    """Limits of the grading and tool sandboxes: the agent's sandbox keys (agent.memory_mb, ...) and timeouts (a
    grading gets 4x a step's, at least 4 minutes)."""
    a = config.agent
    step = float(a.step_timeout_s)
    mib = 1 << 20
    return SandboxLimits(cpu_seconds=int(max(step, 60)) * 4, timeout_s=max(step, 60.0) * 4,
                         memory_bytes=int(a.memory_mb) * mib, processes=int(a.processes),
                         disk_bytes=int(a.disk_mb) * mib, file_bytes=int(a.file_mb) * mib,
                         tmp_bytes=int(a.tmp_mb) * mib, shm_bytes=int(a.shm_mb) * mib)
