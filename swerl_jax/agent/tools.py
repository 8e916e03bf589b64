"""The agent's tools over one repository checkout: a file editor, search and bash, each bash command one sandboxed
call (a minimal view of the host, no network, memory / CPU / process / disk limits, a per-step timeout).

The editor runs here, not in the sandbox, because it only reads and writes files, and it does so through
`confined`: every path is walked from the work dir one component at a time without following a link, so
`../../etc/passwd`, a link planted by a bash command, a FIFO or a link loop is an observation, never a host read
or write; files over `MAX_FILE_BYTES` are not loaded. Search and bash run in the sandbox, like every other
command the model writes, and their text is bounded (`MAX_COMMAND_CHARS`). Observations are cut to a head and a
tail (a view formats only the lines kept: `agent.lines`) and shown without terminal control characters (`visible`,
applied by `env.step`); their text is encoded as text, never as role tokens (`swerl_jax.chat`). Commands that
install packages or start servers are refused before they run. `Workspace.call` turns every failure a tool call
can cause into a `ToolError`, whose message is the observation: nothing the model writes makes the host raise.
"""

from __future__ import annotations

import collections
import pathlib
import re
import shlex
from collections.abc import Mapping

from swerl_jax.agent.actions import Action
from swerl_jax.agent.lines import Lines, numbered
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits, limit_note
from swerl_jax.sandbox.confined import Confined, ConfinedError, split
from swerl_jax.sandbox.workdirs import tree_usage

MAX_OBSERVATION = 8_000
MAX_FILE_BYTES = 8 << 20  # the editor's largest file (view, str_replace, insert): bounds host memory
MAX_LISTING = 10_000  # entries a directory view lists
MAX_UNDO_BYTES = 32 << 20  # old texts kept for undo_edit, all files together (the oldest go first)
STEP_OUTPUT_BYTES = 1 << 20  # what the host keeps of one tool call's output (head and tail)
MAX_COMMAND_CHARS = 32_000  # a bash command or a search term (the kernel refuses one argument over 128 KiB)
REFUSED = re.compile(
    r"\b(pip3?|uv|conda|mamba|poetry)\s+(install|add|download)\b|-m\s+pip\b|\bapt(-get)?\s|\bnohup\b|"
    r"http\.server|\bflask\s+run\b|\buvicorn\b|\bgunicorn\b|\bjupyter\b|(^|[^&])&\s*$")


def cut(text: str, limit: int = MAX_OBSERVATION) -> str:
    """`text`, or its head and tail around a note of how much was left out."""
    if len(text) <= limit:
        return text
    return cut_note(text[:limit * 2 // 3], text[-(limit // 3):], len(text))


def cut_note(head: str, tail: str, total: int) -> str:
    """A cut text of `total` characters shown as its `head` and `tail` around a note of how much was left out."""
    return f"{head}\n[... {total - len(head) - len(tail)} characters cut ...]\n{tail}"


# C0 controls but newline and tab, DEL and C1: a terminal's commands (ESC starts a cursor move, BS overwrites, NUL
# ends a C string), not text; a tool's output or a file's text may hold any of them.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` as an observation or a log shows it: line ends made "\n" (as the editor reads files), every other
    control character dropped."""
    return _CONTROLS.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


class ToolError(ValueError):
    """A tool call that cannot be done as asked; the message is the observation."""


def _text(data: bytes, shown: str) -> str:
    """A file's bytes as the editor edits them: UTF-8, newlines made '\\n' (as Python's text mode reads)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ToolError(f"{shown}: not UTF-8 text (byte {err.start}); edit it with execute_bash") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _encoded(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ToolError(f"{what} is not valid text (character {err.start} cannot be written as UTF-8)") from None


class Workspace:
    """The tools of one episode over `repo` (a checkout inside the sandbox's work dir `work`)."""

    def __init__(self, repo: pathlib.Path, work: pathlib.Path, sandbox: Sandbox, env: Mapping[str, str] | None = None,
                 step_limits: SandboxLimits = SandboxLimits(timeout_s=120, cpu_seconds=180)) -> None:
        self.repo, self.work = pathlib.Path(repo).absolute(), pathlib.Path(work).absolute()
        if not self.repo.is_relative_to(self.work):
            raise ValueError(f"the checkout {self.repo} must be inside the work dir {self.work}")
        # The work dir is the anchor: the model can replace the checkout's folder, not the work dir itself.
        self.files = Confined(self.work, self.repo.relative_to(self.work).parts)
        self.sandbox, self.env, self.step_limits = sandbox, dict(env or {}), step_limits
        self.over_quota = False  # a command left the work dir past its disk quota (the episode ends)
        self.history: dict[tuple[str, ...], list[str | None]] = {}
        self._undo_order: collections.deque[tuple[str, ...]] = collections.deque()  # oldest first, all files
        self._undo_bytes = 0

    # --- paths -------------------------------------------------------------------------------------------------
    def resolve(self, path: str) -> tuple[str, ...]:
        """The components of a path inside the checkout (never through a link), or ToolError."""
        try:
            parts = split(path, self.repo)
        except ConfinedError as err:
            raise ToolError(str(err)) from None
        if ".git" in parts:
            raise ToolError(f"{path}: the repository's .git directory is not editable")
        return parts

    @staticmethod
    def _shown(parts: tuple[str, ...]) -> str:
        return "/".join(parts) or "."

    def _read(self, parts: tuple[str, ...]) -> str:
        return _text(self.files.read(parts, MAX_FILE_BYTES), self._shown(parts))

    # --- the editor --------------------------------------------------------------------------------------------
    def view(self, path: str, view_range: str = "") -> str:
        """A file with line numbers (optionally lines START-END, END -1 = to the end) or a directory listing."""
        parts = self.resolve(path)
        kind = self.files.kind(parts)
        if kind == "dir":
            listed, more = self.files.listdir(parts, MAX_LISTING)
            prefix = "/".join(parts)
            entries = sorted((f"{prefix}/{name}" if prefix else name) + ("/" if is_dir else "")
                             for name, is_dir in listed if name != ".git")
            if more:
                entries.append(f"[... more than {MAX_LISTING} entries: the rest are not listed ...]")
            return cut("\n".join(entries))
        if kind != "file":
            raise ToolError(f"{path}: no such file or directory" if kind is None else
                            f"{path}: {'a symbolic link' if kind == 'link' else 'not a regular file'}; "
                            "the editor opens regular files (use execute_bash)")
        text = self.files.read(parts, MAX_FILE_BYTES).decode("utf-8", errors="replace")
        # offsets, not a list of lines: 8 MiB of newlines as 8M line strings cost the host ~720 MB per view
        lines = Lines(text.replace("\r\n", "\n").replace("\r", "\n"))
        del text
        start, end = 1, lines.count
        if view_range.strip():
            try:
                start, end = (int(v) for v in view_range.replace(",", " ").split())
            except ValueError:
                raise ToolError(f"view_range {view_range!r}: expected two integers 'START END'") from None
            end = lines.count if end == -1 else end
            if not 1 <= start <= max(end, 1) <= max(lines.count, 1):
                raise ToolError(f"view_range {view_range!r} is outside the file's {lines.count} lines")
        # only the lines the observation keeps are formatted (the text is what cut() of every line would give)
        return numbered(lines, start, min(end, lines.count), cut_note, MAX_OBSERVATION * 2 // 3,
                        MAX_OBSERVATION // 3, MAX_OBSERVATION)

    def _write(self, parts: tuple[str, ...], text: str, before: str | None) -> None:
        data = _encoded(text, "the new text")
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(f"{self._shown(parts)}: the new text is {len(data)} bytes, over the editor's limit "
                            f"of {MAX_FILE_BYTES}")
        self.files.write(parts, data)
        self._measure()
        self.history.setdefault(parts, []).append(before)
        self._undo_order.append(parts)
        self._undo_bytes += len(before or "")
        while self._undo_bytes > MAX_UNDO_BYTES:  # bounded host memory: 50 turns of 8 MiB files would be 400 MiB
            oldest = self.history[self._undo_order.popleft()].pop(0)
            self._undo_bytes -= len(oldest or "")

    def create(self, path: str, file_text: str) -> str:
        """A new file (refused when it exists)."""
        parts = self.resolve(path)
        if self.files.kind(parts) is not None:
            raise ToolError(f"{path}: already exists (use str_replace or insert to change it)")
        self._write(parts, file_text, None)
        return f"Created {self._shown(parts)}."

    def _existing(self, path: str) -> tuple[tuple[str, ...], str]:
        parts = self.resolve(path)
        if self.files.kind(parts) != "file":
            raise ToolError(f"{path}: no such file")
        return parts, self._read(parts)

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        """Replace the one occurrence of `old_str`."""
        parts, text = self._existing(path)
        count = text.count(old_str) if old_str else 0
        if count != 1:
            raise ToolError(f"old_str occurs {count} times in {path}; it must occur exactly once")
        self._write(parts, text.replace(old_str, new_str, 1), text)
        at = text.index(old_str)
        first = text[:at].count("\n") + 1
        return f"Edited {self._shown(parts)}:\n" + self.view(
            path, f"{max(1, first - 3)} {min(first + new_str.count(chr(10)) + 3, self._lines(parts))}")

    def insert(self, path: str, insert_line: str, new_str: str) -> str:
        """Insert `new_str` after line `insert_line` (0: at the top)."""
        parts, text = self._existing(path)
        try:
            at = int(insert_line)
        except ValueError:
            raise ToolError(f"insert_line {insert_line!r} is not an integer") from None
        lines = Lines(text)  # offsets, not a list of lines (host memory)
        if not 0 <= at <= lines.count:
            raise ToolError(f"insert_line {at} is outside the file's {lines.count} lines")
        offset = lines.start(at + 1)
        before = text[:offset]
        if at == lines.count and before and not before.endswith("\n"):
            before += "\n"
        added = new_str + ("" if new_str.endswith("\n") else "\n")
        self._write(parts, before + added + text[offset:], text)
        return f"Inserted after line {at} of {self._shown(parts)}."

    def undo_edit(self, path: str) -> str:
        """Revert the last create / str_replace / insert of `path`."""
        parts = self.resolve(path)
        if not self.history.get(parts):
            raise ToolError(f"{path}: no edit to undo")
        before = self.history[parts].pop()
        self._undo_order.reverse()  # the newest entry of this file is its last one in the order
        self._undo_order.remove(parts)
        self._undo_order.reverse()
        self._undo_bytes -= len(before or "")
        if before is None:
            self.files.unlink(parts)
        else:
            self.files.write(parts, _encoded(before, "the old text"))
            self._measure()
        return f"Reverted the last edit of {self._shown(parts)}."

    def _measure(self) -> None:
        """Hold an editor write to the work dir's quota, as a command is: the editor writes on the host between
        commands, where no poll sees it, so editor-only turns added up to 8 MiB each past the quota unseen."""
        used, entries = tree_usage(self.work, self.step_limits.disk_files)
        if used > self.step_limits.disk_bytes or entries > self.step_limits.disk_files:
            self.over_quota = True  # the episode ends (env.step), as when a command leaves it over

    def _lines(self, parts: tuple[str, ...]) -> int:
        text = self.files.read(parts, MAX_FILE_BYTES).decode("utf-8", errors="replace")
        return max(1, Lines(text.replace("\r\n", "\n").replace("\r", "\n")).count)

    # --- sandboxed commands ------------------------------------------------------------------------------------
    @staticmethod
    def _bounded(text: str, what: str) -> None:
        if len(text) > MAX_COMMAND_CHARS:
            raise ToolError(f"the {what} is {len(text)} characters; the limit is {MAX_COMMAND_CHARS} "
                            "(write long text to a file with file_editor create)")
        if "\0" in text:
            raise ToolError(f"the {what} holds a NUL byte")
        _encoded(text, f"the {what}")

    def bash(self, command: str) -> str:
        """One command in the sandbox, in the repository; its output (cut) and exit code, or the limit it hit."""
        self._bounded(command, "command")
        if REFUSED.search(command):
            raise ToolError("refused: installing packages and starting servers or background jobs are not "
                            "allowed here (no network; every command must finish)")
        done = self.sandbox.run(f"cd {shlex.quote(str(self.repo))} && {command}", self.work, env=self.env,
                                limits=self.step_limits)
        if done.limit is not None:
            self.over_quota = self.over_quota or done.limit == "disk"
            return cut(done.output) + "\n" + limit_note(done, self.step_limits)
        return cut(done.output) + f"\n[exit code {done.returncode}]"

    def search(self, search_term: str, path: str = ".") -> str:
        """Lines containing `search_term` (fixed string) under `path`, with file and line number."""
        self._bounded(search_term, "search term")
        parts = self.resolve(path or ".")
        command = (f"grep -rnIF --exclude-dir=.git -e {shlex.quote(search_term)} "
                   f"{shlex.quote(self._shown(parts))} | head -n 200")
        done = self.sandbox.run(f"cd {shlex.quote(str(self.repo))} && {command}", self.work, env=self.env,
                                limits=self.step_limits)
        if done.limit is not None:
            self.over_quota = self.over_quota or done.limit == "disk"
            return cut(done.output) + "\n" + limit_note(done, self.step_limits)
        return cut(done.output) if done.output.strip() else f"No matches for {search_term!r} in {path or '.'}."

    def diff(self, base: str = "") -> str:
        """The checkout's changes since `base` (a commit; default the index) as a patch, new files included:
        `git diff` run in the sandbox, since .git is the model's to write (hooks, pagers, external diff)."""
        # Python hunk headers name the enclosing function, as GitHub's (and so SWE-bench's gold) patches do: the
        # similarity reward compares the hunks' text, headers included. The attributes file enters read-only at
        # $INPUTS: the host writes nothing where the model could have planted a link.
        attributes = "$INPUTS/gitattributes"
        git = f"git -c core.pager=cat -c core.hooksPath=/dev/null -c core.attributesFile={attributes}"
        since = shlex.quote(base) if base else ""
        # The prefixes are the standard ones whatever .git/config says (diff.noprefix, diff.mnemonicPrefix): the
        # test-infrastructure detector and the similarity reward read them. stderr is not the patch: a warning (or a
        # hook the model planted in .git) must not become part of it
        done = self.sandbox.run(f"cd {shlex.quote(str(self.repo))} && {git} add -N . 2>/dev/null && "
                                f"{git} diff --no-ext-diff --no-color --no-textconv --no-relative --src-prefix=a/ "
                                f"--dst-prefix=b/ {since} 2>/dev/null",
                                self.work, env=self.env, limits=self.step_limits,
                                inputs={"gitattributes": "*.py diff=python\n"})
        return done.output if done.returncode == 0 else ""

    def call(self, action: Action) -> str:
        """Run a parsed action (not finish) and return its observation; ToolError for any call that cannot run,
        with its reason (a path the kernel refuses, a file that is not text, a command too long)."""
        try:
            return self._call(action)
        except ConfinedError as err:
            raise ToolError(str(err)) from None
        except (OSError, ValueError) as err:  # UnicodeError is a ValueError; ToolError passes through as one
            if isinstance(err, ToolError):
                raise
            raise ToolError(f"{type(err).__name__}: {err}") from None

    def _call(self, action: Action) -> str:
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
