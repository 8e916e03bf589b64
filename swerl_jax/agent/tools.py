"""The agent's tools over one repository checkout: a file editor, search and bash, each bash command one sandboxed
call (no network, read-only outside the work dir, memory / CPU / process limits, a per-step timeout).

The editor runs here, not in the sandbox, because it only reads and writes files: every path is resolved (links
followed) and must stay inside the checkout, so `../../etc/passwd` or a symlink planted by a bash command cannot
reach outside it. Search and bash run in the sandbox, like every other command the model writes. Observations
are cut to a head and a tail. Commands that install packages or start servers are refused before they run.
"""

from __future__ import annotations

import pathlib
import re
import shlex
from collections.abc import Mapping

from swerl_jax.agent.actions import Action
from swerl_jax.eval.sandbox import Sandbox, SandboxLimits

MAX_OBSERVATION = 8_000
REFUSED = re.compile(
    r"\b(pip3?|uv|conda|mamba|poetry)\s+(install|add|download)\b|-m\s+pip\b|\bapt(-get)?\s|\bnohup\b|"
    r"http\.server|\bflask\s+run\b|\buvicorn\b|\bgunicorn\b|\bjupyter\b|(^|[^&])&\s*$")


def cut(text: str, limit: int = MAX_OBSERVATION) -> str:
    """`text`, or its head and tail around a note of how much was left out."""
    if len(text) <= limit:
        return text
    head, tail = text[:limit * 2 // 3], text[-(limit // 3):]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


class ToolError(ValueError):
    """A tool call that cannot be done as asked; the message is the observation."""


class Workspace:
    """The tools of one episode over `repo` (a checkout inside the sandbox's work dir `work`)."""

    def __init__(self, repo: pathlib.Path, work: pathlib.Path, sandbox: Sandbox, env: Mapping[str, str] | None = None,
                 step_limits: SandboxLimits = SandboxLimits(timeout_s=120, cpu_seconds=180)) -> None:
        self.repo, self.work = pathlib.Path(repo).resolve(), pathlib.Path(work).resolve()
        self.sandbox, self.env, self.step_limits = sandbox, dict(env or {}), step_limits
        self.history: dict[pathlib.Path, list[str | None]] = {}

    # --- paths -------------------------------------------------------------------------------------------------
    def resolve(self, path: str) -> pathlib.Path:
        """An absolute path inside the checkout (links followed), or ToolError."""
        p = pathlib.Path(path)
        full = (p if p.is_absolute() else self.repo / p).resolve()
        if full != self.repo and self.repo not in full.parents:
            raise ToolError(f"{path}: outside the repository ({self.repo})")
        if ".git" in full.relative_to(self.repo).parts:
            raise ToolError(f"{path}: the repository's .git directory is not editable")
        return full

    # --- the editor --------------------------------------------------------------------------------------------
    def view(self, path: str, view_range: str = "") -> str:
        """A file with line numbers (optionally lines START-END, END -1 = to the end) or a directory listing."""
        full = self.resolve(path)
        if full.is_dir():
            entries = sorted(str(p.relative_to(self.repo)) + ("/" if p.is_dir() else "")
                             for p in full.iterdir() if p.name != ".git")
            return cut("\n".join(entries))
        if not full.is_file():
            raise ToolError(f"{path}: no such file or directory")
        lines = full.read_text(errors="replace").splitlines()
        start, end = 1, len(lines)
        if view_range.strip():
            try:
                start, end = (int(v) for v in view_range.replace(",", " ").split())
            except ValueError:
                raise ToolError(f"view_range {view_range!r}: expected two integers 'START END'") from None
            end = len(lines) if end == -1 else end
            if not 1 <= start <= max(end, 1) <= max(len(lines), 1):
                raise ToolError(f"view_range {view_range!r} is outside the file's {len(lines)} lines")
        return cut("\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines[start - 1:end], start)))

    def _write(self, full: pathlib.Path, text: str) -> None:
        self.history.setdefault(full, []).append(full.read_text() if full.exists() else None)
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)

    def create(self, path: str, file_text: str) -> str:
        """A new file (refused when it exists)."""
        full = self.resolve(path)
        if full.exists():
            raise ToolError(f"{path}: already exists (use str_replace or insert to change it)")
        self._write(full, file_text)
        return f"Created {full.relative_to(self.repo)}."

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        """Replace the one occurrence of `old_str`."""
        full = self.resolve(path)
        if not full.is_file():
            raise ToolError(f"{path}: no such file")
        text = full.read_text()
        count = text.count(old_str) if old_str else 0
        if count != 1:
            raise ToolError(f"old_str occurs {count} times in {path}; it must occur exactly once")
        self._write(full, text.replace(old_str, new_str, 1))
        at = text.index(old_str)
        first = text[:at].count("\n") + 1
        return f"Edited {full.relative_to(self.repo)}:\n" + self.view(
            path, f"{max(1, first - 3)} {min(first + new_str.count(chr(10)) + 3, self._lines(full))}")

    def insert(self, path: str, insert_line: str, new_str: str) -> str:
        """Insert `new_str` after line `insert_line` (0: at the top)."""
        full = self.resolve(path)
        if not full.is_file():
            raise ToolError(f"{path}: no such file")
        try:
            at = int(insert_line)
        except ValueError:
            raise ToolError(f"insert_line {insert_line!r} is not an integer") from None
        lines = full.read_text().splitlines(keepends=True)
        if not 0 <= at <= len(lines):
            raise ToolError(f"insert_line {at} is outside the file's {len(lines)} lines")
        if lines and not lines[-1].endswith("\n") and at == len(lines):
            lines[-1] += "\n"
        self._write(full, "".join(lines[:at] + [new_str + ("" if new_str.endswith("\n") else "\n")] + lines[at:]))
        return f"Inserted after line {at} of {full.relative_to(self.repo)}."

    def undo_edit(self, path: str) -> str:
        """Revert the last create / str_replace / insert of `path`."""
        full = self.resolve(path)
        if not self.history.get(full):
            raise ToolError(f"{path}: no edit to undo")
        before = self.history[full].pop()
        if before is None:
            full.unlink()
        else:
            full.write_text(before)
        return f"Reverted the last edit of {full.relative_to(self.repo)}."

    def _lines(self, full: pathlib.Path) -> int:
        return max(1, len(full.read_text(errors="replace").splitlines()))

    # --- sandboxed commands ------------------------------------------------------------------------------------
    def bash(self, command: str) -> str:
        """One command in the sandbox, in the repository; its output (cut) and exit code."""
        if REFUSED.search(command):
            raise ToolError("refused: installing packages and starting servers or background jobs are not "
                            "allowed here (no network; every command must finish)")
        done = self.sandbox.run(f"cd {shlex.quote(str(self.repo))} && {command}", self.work, env=self.env,
                                limits=self.step_limits)
        if done.timed_out:
            return cut(done.output) + f"\n[timed out after {self.step_limits.timeout_s:.0f} s; the command was killed]"
        return cut(done.output) + f"\n[exit code {done.returncode}]"

    def search(self, search_term: str, path: str = ".") -> str:
        """Lines containing `search_term` (fixed string) under `path`, with file and line number."""
        target = self.resolve(path or ".")
        command = (f"grep -rnIF --exclude-dir=.git -e {shlex.quote(search_term)} "
                   f"{shlex.quote(str(target.relative_to(self.repo)) or '.')} | head -n 200")
        done = self.sandbox.run(f"cd {shlex.quote(str(self.repo))} && {command}", self.work, env=self.env,
                                limits=self.step_limits)
        return cut(done.output) if done.output.strip() else f"No matches for {search_term!r} in {path or '.'}."

    def diff(self, base: str = "") -> str:
        """The checkout's changes since `base` (a commit; default the index) as a patch, new files included:
        `git diff` run in the sandbox, since .git is the model's to write (hooks, pagers, external diff)."""
        # Python hunk headers name the enclosing function, as GitHub's (and so SWE-bench's gold) patches do: the
        # similarity reward compares the hunks' text, headers included.
        attributes = self.work / ".agent_gitattributes"
        attributes.write_text("*.py diff=python\n")
        git = f"git -c core.pager=cat -c core.hooksPath=/dev/null -c core.attributesFile={shlex.quote(str(attributes))}"
        since = shlex.quote(base) if base else ""
        done = self.sandbox.run(f"cd {shlex.quote(str(self.repo))} && {git} add -N . && "
                                f"{git} diff --no-ext-diff --no-color --no-textconv {since}",
                                self.work, env=self.env, limits=self.step_limits)
        return done.output if done.returncode == 0 else ""

    def call(self, action: Action) -> str:
        """Run a parsed action (not finish) and return its observation; ToolError for a call that cannot run."""
        p = action.params
        if action.function == "execute_bash":
            return self.bash(p["command"])
        if action.function == "search":
            return self.search(p["search_term"], p.get("path", "."))
        command = p["command"]
        need = {"create": ("file_text",), "str_replace": ("old_str", "new_str"), "insert": ("insert_line", "new_str")}
        missing = [k for k in need.get(command, ()) if k not in p]
        if missing:
            raise ToolError(f"file_editor {command} needs {missing}")
        if command == "view":
            return self.view(p["path"], p.get("view_range", ""))
        if command == "create":
            return self.create(p["path"], p["file_text"])
        if command == "str_replace":
            return self.str_replace(p["path"], p["old_str"], p["new_str"])
        if command == "insert":
            return self.insert(p["path"], p["insert_line"], p["new_str"])
        return self.undo_edit(p["path"])
