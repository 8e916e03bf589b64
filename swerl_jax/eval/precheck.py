"""Out of reach before any generation: what the harness would find without building or running anything.

Agentless generated for 1m26s before the harness found both instances out of reach (issue 57 item 7). These
checks need no environment build and no sandbox, only the clones and this machine: its environment is a venv this
machine's builder makes (not conda) and the interpreter it needs is here
(`EnvironmentCache.plan`, which the build itself starts with, so the reason and fix are the harness's own words).
A lack only a build or a test run shows (a compiler, the package index, the tests' network) is still found by the
harness; any other problem here is left to it too, so this check never skips an instance the harness would grade.
A missing clone is left to the pipeline, which fails on it before generating (no prediction, retried on a re-run).

`split_by_empty_grading` (`precheck=grade_empty`) finds the rest too: it grades the empty patch of each instance
first, as the harness would (the environment built, the tests run), and skips those the grading finds out of reach
(psf/requests: its tests need the network). It costs one grading per instance; its result is never the model's.
"""

from __future__ import annotations

import pathlib
import subprocess

from swerl_jax.tasks import environments, reach, specs


def out_of_reach(instance: dict, repos_dir: pathlib.Path, scratch: pathlib.Path) -> reach.OutOfReach | None:
    """Why `instance` is out of reach of this machine whatever its patch, as far as is known without a build, or
    None. `scratch`: where a bundle in --repos is cloned (the run's own folder, as the harness does)."""
    try:
        git_dir = environments.resolve_clone(repos_dir, instance["repo"], scratch)
    except (FileNotFoundError, subprocess.CalledProcessError):
        return None  # no clone: the pipeline fails there before any generation (no prediction, retried on a re-run)
    try:
        environments.EnvironmentCache(root=scratch / "unused-envs").plan(instance, git_dir)
    except reach.OutOfReach as lack:  # conda, or no interpreter of the version
        return reach.OutOfReach(lack.reason, lack.fix)
    except (specs.SpecError, environments.EnvironmentError_, subprocess.CalledProcessError, OSError, KeyError):
        return None  # not a lack of this machine: the harness grades and names it
    return None


def split_reachable(instances: list[dict], repos_dir: pathlib.Path, scratch: pathlib.Path
                    ) -> tuple[list[dict], dict[str, reach.OutOfReach]]:
    """(the instances within reach, in order; {instance_id: why} of those out of reach)."""
    kept, far = [], {}
    for instance in instances:
        lack = out_of_reach(instance, repos_dir, scratch)
        if lack is None:
            kept.append(instance)
        else:
            far[instance["instance_id"]] = lack
    return kept, far


def split_by_empty_grading(instances: list[dict], executor, log_root: pathlib.Path
                           ) -> tuple[list[dict], dict[str, reach.OutOfReach]]:
    """(the instances whose empty patch `executor` grades within reach, in order; {instance_id: why} of those it
    finds out of reach). Logs under `log_root/<id>`; every other result (resolved, unresolved, an error) keeps the
    instance: only the lack of this machine skips it."""
    kept, far = [], {}
    for instance in instances:
        log_dir = log_root / instance["instance_id"]
        log_dir.mkdir(parents=True, exist_ok=True)
        result = executor.evaluate(instance, "", log_dir)
        if result.get("status") == reach.STATUS:
            far[instance["instance_id"]] = reach.OutOfReach(str(result.get("reason", "")), str(result.get("fix", "")))
        else:
            kept.append(instance)
    return kept, far
