"""Out of reach before any generation: what the harness would find without building or running anything.

Agentless generated for 1m26s before the harness found both instances out of reach (issue 57 item 7). These
checks need no environment build and no sandbox, only the clones and this machine: its environment is a venv this
machine's builder makes (not conda) and the interpreter it needs is here
(`EnvironmentCache.plan`, which the build itself starts with, so the reason and fix are the harness's own words).
A lack only a build or a test run shows (a compiler, the package index, the tests' network) is still found by the
harness; any other problem here is left to it too, so this check never skips an instance the harness would grade.
A missing clone is left to the pipeline, which fails on it before generating (no prediction, retried on a re-run).
"""

from __future__ import annotations

import pathlib
import subprocess

from swerl_jax.eval import environments, reach, specs


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
