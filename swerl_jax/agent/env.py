"""An SWE environment with rLLM's `SWEEnv` shape (reset / step / final reward) on the harness's sandbox.

`reset()` checks the instance out at its base commit in a fresh work dir (its ancestors, verified: no later
history to read the fix from), installs it into a thin venv over the harness's cached environment (the only step
with the network, before any model-written code), and returns the task. The episode's sandbox sees its own work
dir and nothing of the host's beyond the system and its interpreter (`sandbox.bwrap`). Hidden tests never enter
it: `reward()` grades the episode's diff in a fresh checkout of the grader's own, in a directory the model never
saw, and the host keeps its logs outside the work dir. `step(text)` parses one action, runs it (see `tools`) and
returns (observation, done, info); a malformed action, and any tool call that fails, is an observation and
counts as a tool error: nothing the model writes makes `step` raise. The episode ends at `finish`, after
`max_turns`, past `timeout_s` of wall clock, or when a command leaves the work dir past its disk quota (`disk`);
`termination` says which. `reward()` grades the final diff:
`execution` runs the instance's FAIL_TO_PASS / PASS_TO_PASS tests in the harness (1 or 0), `similarity` is
SWE-RL's difflib reward of the diff against the PR's patch (-1 for an empty diff), so PR records without tests
can train agents too.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
import uuid

from swerl_jax.agent.actions import ActionError, parse_action, tool_instructions
from swerl_jax.agent.tools import STEP_OUTPUT_BYTES, ToolError, Workspace, cut, visible
from swerl_jax.reward.test_infra import test_infra_paths
from swerl_jax.sandbox.bwrap import SandboxLimits
from swerl_jax.sandbox.workdirs import remove_tree
from swerl_jax.tasks import environments
from swerl_jax.tasks.executors import LocalExecutor, ScriptExecutor
from swerl_jax.tasks.pool import Lease, WarmPool

REWARDS = ("execution", "similarity")
TERMINATIONS = ("finish", "max_turns", "timeout", "max_context", "disk")


@dataclasses.dataclass
class EpisodeStats:
    """What an episode did, for metrics (turns, tool errors, time split, termination)."""

    turns: int = 0
    tool_errors: int = 0
    env_seconds: float = 0.0
    termination: str | None = None


class SWEEnv:
    """One SWE-bench-style instance as a multi-turn environment."""

    def __init__(self, instance: dict, repos_dir: str | pathlib.Path, work_root: str | pathlib.Path, *,
                 envs: environments.EnvironmentCache | None = None, reward: str = "execution", max_turns: int = 30,
                 timeout_s: float = 1800.0, step_timeout_s: float = 120.0,
                 limits: SandboxLimits = SandboxLimits(), executor: ScriptExecutor | None = None,
                 compact: bool = False, test_infra_unresolved: bool = False, pool: WarmPool | None = None) -> None:
        """`executor` sets up and grades the instance (`prepare` / `evaluate`): default the harness's
        `LocalExecutor` over `repos_dir`; `agent.synthetic.SyntheticExecutor` for synthetic tasks.
        test_infra_unresolved: the execution reward scores a patch that changes how tests run (conftest.py, pytest
        or tox settings, sitecustomize, .pth; swerl_jax/reward/test_infra.py) as unresolved.
        pool: `reset` takes a checkout the pool prepared ahead (`tasks.pool.WarmPool` over the same executor's
        prepare) instead of preparing one, and `close` hands it back to be removed (never reused)."""
        if reward not in REWARDS:
            raise ValueError(f"reward={reward!r} is not one of {REWARDS}")
        self.instance, self.reward_kind = instance, reward
        self.max_turns, self.timeout_s, self.compact = max_turns, timeout_s, compact
        self.test_infra_unresolved = test_infra_unresolved
        self.work_root = pathlib.Path(work_root)
        # the execution reward: the trusted plugin's record, never pytest's log (sandbox/pytest_verdict.py)
        self.executor = executor or LocalExecutor(pathlib.Path(repos_dir), self.work_root,
                                                  envs or environments.EnvironmentCache(), limits, verdict="plugin")
        # A tool call runs under the episode's limits with its own clock; the host keeps at most
        # STEP_OUTPUT_BYTES of its output (the observation is cut to MAX_OBSERVATION characters anyway).
        self.step_limits = dataclasses.replace(limits, cpu_seconds=int(step_timeout_s) + 30, timeout_s=step_timeout_s,
                                               output_bytes=min(limits.output_bytes, STEP_OUTPUT_BYTES))
        self.workspace: Workspace | None = None
        self.stats = EpisodeStats()
        self._started = 0.0
        self._work: pathlib.Path | None = None
        self._host: pathlib.Path | None = None  # the host's own files of the episode (logs, grading), never bound
        self.pool, self._lease = pool, None

    def task(self) -> str:
        """The first user message: the issue and the tools (`compact`: the tools' syntax in a few lines)."""
        return (f"Solve this issue in the {self.instance['repo']} repository, checked out in the current "
                f"directory. Edit the source code (not the tests); call finish when done.\n\n<issue>\n"
                f"{self.instance['problem_statement']}\n</issue>\n\n" + tool_instructions(self.compact))

    def reset(self) -> str:
        """Prepare a fresh checkout and return the task (RuntimeError naming the step that failed)."""
        self.close()
        iid = self.instance["instance_id"]
        if self.pool is not None:
            self._lease = self.pool.take(self.instance)
            self._work, self._host, ready = self._lease.work, self._lease.host, self._lease.ready
        else:
            name = f"{iid}.{uuid.uuid4().hex[:12]}"
            self._work = self.work_root / "episodes" / name
            self._work.mkdir(parents=True)
            self._host = self.work_root / "host" / name
            log_dir = self._host / "logs"
            log_dir.mkdir(parents=True)
            ready = self.executor.prepare(self.instance, "", log_dir, self._work)
        if "status" in ready:
            raise RuntimeError(f"{iid}: environment not ready ({ready['status']}): {ready.get('error')}")
        self.workspace = Workspace(ready["repo_dir"], self._work, ready["sandbox"], ready["env"], self.step_limits)
        self.stats = EpisodeStats()
        self._started = time.monotonic()
        return self.task()

    def step(self, text: str) -> tuple[str, bool, dict]:
        """Run the turn's action: (observation, done, info with `error` and `termination`)."""
        if self.workspace is None:
            raise RuntimeError("step() before reset()")
        if self.stats.termination is not None:
            raise RuntimeError(f"the episode has ended ({self.stats.termination})")
        self.stats.turns += 1
        t0 = time.monotonic()
        error = False
        done = False
        try:
            action = parse_action(text)
            if action.function == "finish":
                observation, done, self.stats.termination = "Submitted.", True, "finish"
            else:
                observation = self.workspace.call(action)
        except (ActionError, ToolError) as err:  # Workspace.call turns every failure of a call into a ToolError
            observation, error = f"ERROR: {err}", True
            self.stats.tool_errors += 1
        self.stats.env_seconds += time.monotonic() - t0
        # The quota is the work dir's: no later command would run, the final diff neither (graded as empty).
        if not done and self.workspace.over_quota:
            observation += "\n[the episode ends: its work dir is past its disk quota]"
            done, self.stats.termination = True, "disk"
        if not done and self.stats.turns >= self.max_turns:
            done, self.stats.termination = True, "max_turns"
        if not done and time.monotonic() - self._started > self.timeout_s:
            done, self.stats.termination = True, "timeout"
        # what reaches the tokenizer (and every transcript and log made from it) is valid text without terminal
        # controls: a file name or an echoed parameter may hold lone surrogates, a tool's output escape sequences
        observation = cut(visible(observation)).encode("utf-8", errors="replace").decode("utf-8")
        return observation, done, {"error": error, "termination": self.stats.termination}

    def end(self, termination: str) -> None:
        """End the episode from outside (the trainer's context limit: `max_context`)."""
        if termination not in TERMINATIONS:
            raise ValueError(f"termination {termination!r} is not one of {TERMINATIONS}")
        self.stats.termination = self.stats.termination or termination

    def patch(self) -> str:
        """The episode's change since the base commit."""
        return self.workspace.diff(self.instance["base_commit"]) if self.workspace else ""

    def reward(self) -> tuple[float, dict]:
        """The final reward and how it was reached."""
        patch = self.patch()
        if self.reward_kind == "similarity":
            from swerl_jax.reward.functions import calculate_reward_unidiff

            if not patch.strip():
                return -1.0, {"reason": "empty diff"}
            value, info = calculate_reward_unidiff([self.instance["patch"]], [patch])
            return float(value), {"patch": patch, **info}
        log_dir = self._host / "grade"
        log_dir.mkdir(exist_ok=True)
        result = self.executor.evaluate(self.instance, patch, log_dir)
        # the grading log lies in the episode's host folder, which `close` removes: a rollout's reward_info named a
        # file that was gone by the time anyone read it (issue 57 item 6); the verdict's fields stay
        result = {k: v for k, v in result.items() if k != "log"}
        # A patch that changes how tests run can pass them without a fix; always named in the info (the metric
        # agent/resolved_test_infra_rate), scored unresolved when the run says so.
        infra = test_infra_paths(patch, self.instance.get("repo"))
        resolved = result.get("status") == "resolved"
        info = {"patch": patch, **result, "test_infra_paths": infra, "tests_resolved": resolved}
        if resolved and infra and self.test_infra_unresolved:
            resolved = False
        return (1.0 if resolved else 0.0), info

    def close(self) -> None:
        """Remove the episode's work dir and the host's files of it (a pool's: handed back, which removes them)."""
        lease: Lease | None = self._lease
        if lease is not None:
            self.pool.release(lease)
        else:
            for path in (self._work, self._host):
                if path is not None:
                    remove_tree(path)  # any depth, never following a link the model left
        self._work, self._host, self.workspace, self._lease = None, None, None, None
