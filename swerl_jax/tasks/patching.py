"""Apply a patch with the official harness's fallback chain, inside the sandbox.

The chain (SWE-bench run_evaluation): `git apply --verbose`, then `git apply --verbose --reject`, then
`patch --batch --fuzz=5 -p1 -i`. The first that succeeds wins; every attempt's output goes into the log.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shlex

from swerl_jax.sandbox.bwrap import Sandbox

APPLY_CHAIN = ("git apply --verbose", "git apply --verbose --reject", "patch --batch --fuzz=5 -p1 -i")


@dataclasses.dataclass(frozen=True)
class PatchResult:
    """Whether a patch applied, by which command (None when none did), and the combined log."""

    applied: bool
    command: str | None
    log: str


def apply_patch(sandbox: Sandbox, workdir: pathlib.Path, repo_dir: pathlib.Path, patch: str) -> PatchResult:
    """Apply `patch` to the checkout `repo_dir` (inside `workdir`, the sandbox's writable dir).

    An empty patch applies trivially (nothing to change). A failed attempt of the lenient steps can leave partial
    edits (`--reject` writes what applied), so the checkout is reset before each next attempt.
    """
    if not patch.strip():
        return PatchResult(True, None, "empty patch: nothing to apply\n")
    # The patch enters read-only at $INPUTS, never through the work dir, where an earlier command could have
    # planted a link for the host to write through.
    inputs = {"model.patch": patch if patch.endswith("\n") else patch + "\n"}
    log = []
    for command in APPLY_CHAIN:
        script = f"cd {shlex.quote(str(repo_dir))} && {command} \"$INPUTS/model.patch\""
        result = sandbox.run(script, workdir, inputs=inputs)
        log.append(f"$ {command} model.patch\n{result.output}(exit {result.returncode})\n")
        if result.returncode == 0:
            return PatchResult(True, command, "".join(log))
        reset = sandbox.run(f"cd {shlex.quote(str(repo_dir))} && git checkout -q -- . && git clean -fdq", workdir)
        log.append(f"$ git checkout -- . && git clean -fd\n{reset.output}")
    return PatchResult(False, None, "".join(log))
