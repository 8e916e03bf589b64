"""Git run by the host process (not in the sandbox), with every setting that makes git run a command turned off.

A repository's `.git/config` can name commands git runs on its own: hooks (`core.hooksPath`, `.git/hooks/*`), a
file-system monitor (`core.fsmonitor`, run through the shell by `git status`, `add`, `diff`), a pager, an editor.
Git the model drives runs in the sandbox (`agent.tools.Workspace.diff`); git the host runs goes through
`host_git`, which overrides those settings on the command line (`-c` outranks every config file) and reads no
system or global config, so a config file that host git meets runs nothing even when its repository was written
by someone else.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from collections.abc import Mapping, Sequence

# -c overrides: no hooks, no fsmonitor command, no pager or editor, no credential or ssh helper
SAFE_CONFIG = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false", "core.pager=cat",
               "core.editor=true", "core.sshCommand=false", "credential.helper=", "core.askPass=true")
SAFE_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat", "GIT_EDITOR": "true"}


def git_command(repo: str | pathlib.Path | None, args: Sequence[str], config: Sequence[str] = ()) -> list[str]:
    """argv of `git [-C repo] -c SAFE... -c config... args`."""
    argv = ["git"] + (["-C", str(repo)] if repo is not None else [])
    for setting in (*SAFE_CONFIG, *config):
        argv += ["-c", setting]
    return argv + list(args)


def host_git(repo: str | pathlib.Path | None, *args: str, config: Sequence[str] = (),
             env: Mapping[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run` of git in `repo` with `SAFE_CONFIG` and `SAFE_ENV` (after `env`, so they win); `kwargs`
    pass through (check, capture_output, input, text)."""
    return subprocess.run(git_command(repo, args, config), env={**os.environ, **(env or {}), **SAFE_ENV}, **kwargs)
