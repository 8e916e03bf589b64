r"""The agent's action format and its parser: R2E-Gym's / DeepSWE's function-call blocks.

    <function=file_editor>
    <parameter=command>str_replace</parameter>
    <parameter=path>src/flask/blueprints.py</parameter>
    <parameter=old_str>...</parameter>
    <parameter=new_str>...</parameter>
    </function>

Any chat template can express it (plain text). The first complete block of a turn is its action; a turn without
one, an unknown function, a missing or unknown parameter is an `ActionError` whose message becomes the
observation: the episode goes on and the error is counted, it never crashes.

Parsing is linear in the text (a scanner, not a lazy regex: `"<function=a>" * 32000` took 80 s with
`<function=([^>\s]*)>(.*?)</function>`), and a turn longer than `MAX_ACTION_CHARS` is refused outright.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

# function -> (required parameters, optional parameters)
TOOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "file_editor": (("command", "path"), ("file_text", "old_str", "new_str", "insert_line", "view_range")),
    "search": (("search_term",), ("path",)),
    "execute_bash": (("command",), ()),
    "finish": ((), ("result",)),
}
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")

# A turn is at most sampler.max_new_tokens tokens (8192 in the largest configs, a few characters each): 1 MiB
# of text is far beyond any real action, and refusing more bounds the parser's work whatever the policy writes.
MAX_ACTION_CHARS = 1 << 20

_NAME = re.compile(r"[^>\s]*")  # a tag's name: one greedy character class, linear, never backtracks


class ActionError(ValueError):
    """A malformed action; the message is what the model is told."""


@dataclasses.dataclass(frozen=True)
class Action:
    """One parsed tool call."""

    function: str
    params: dict[str, str]


def _strip_one_newline(value: str) -> str:
    """Parameter values lose one leading and one trailing newline (the block's own line breaks)."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _find_block(text: str, start: int, open_tag: str, close_tag: str) -> tuple[str, int, int, int] | None:
    """The leftmost `open_tag NAME> ... close_tag` at or after `start`, as (name, body start, body end, end).

    Exactly `re.compile(open_tag + r"([^>\\s]*)>(.*?)" + close_tag, re.DOTALL).search(text, start)`, in linear
    time: at a candidate the name is the maximal run of `[^>\\s]` after the tag and must be followed by ">"
    (a shorter name would be followed by a name character, never ">"); the lazy body ends at the first
    `close_tag` after ">". Two things keep it linear. (1) Every candidate inside one run of name characters
    has the same run end ("<function=<function=<function=..." is one run), so the run is scanned once and
    remembered. (2) When a candidate's ">" has no `close_tag` after it, no later candidate has one either,
    so the search stops instead of trying the next candidate.
    """
    run_end = -1  # end of the last scanned name run; candidates before it share it
    pos = text.find(open_tag, start)
    while pos >= 0:
        name_start = pos + len(open_tag)
        if name_start > run_end:
            run_end = _NAME.match(text, name_start).end()
        if run_end < len(text) and text[run_end] == ">":
            body_end = text.find(close_tag, run_end + 1)
            if body_end < 0:
                return None
            return text[name_start:run_end], run_end + 1, body_end, body_end + len(close_tag)
        pos = text.find(open_tag, pos + 1)
    return None


def _parameters(body: str) -> list[tuple[str, str]]:
    """`re.findall(r"<parameter=([^>\\s]*)>(.*?)</parameter>", body, re.DOTALL)`, in linear time.

    findall resumes after each match; candidates after it lie past every run scanned so far, so each
    `_find_block` call's own run memo is enough and the total work stays linear.
    """
    found, pos = [], 0
    while (block := _find_block(body, pos, "<parameter=", "</parameter>")) is not None:
        key, value_start, value_end, pos = block
        found.append((key, body[value_start:value_end]))
    return found


def parse_action(text: str) -> Action:
    """The turn's first function block as an Action (ActionError when there is none or it is malformed).

    The first block by start position, its body up to the first `</function>`; a text longer than
    MAX_ACTION_CHARS is an ActionError before any parsing.
    """
    if len(text) > MAX_ACTION_CHARS:
        raise ActionError(f"The turn has {len(text)} characters, over the limit of {MAX_ACTION_CHARS} for an "
                          "action; call one tool with a shorter text.")
    block = _find_block(text, 0, "<function=", "</function>")
    if block is None:
        raise ActionError("No function call found. Call exactly one tool per turn: "
                          "<function=NAME><parameter=KEY>VALUE</parameter></function>.")
    name, body_start, body_end, _ = block
    return make_action(name, _parameters(text[body_start:body_end]))


def make_action(name: str, pairs: Iterable[tuple[str, str]]) -> Action:
    """The Action of a function block's name and (key, raw value) pairs, checked against TOOLS (ActionError)."""
    if name not in TOOLS:
        raise ActionError(f"Unknown function {name!r}; the tools are {', '.join(TOOLS)}.")
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            raise ActionError(f"Parameter {key!r} of {name} is given twice.")
        params[key] = _strip_one_newline(value)
    required, optional = TOOLS[name]
    unknown = sorted(set(params) - set(required) - set(optional))
    if unknown:
        raise ActionError(f"Unknown parameter(s) {unknown} for {name}; it takes {list(required + optional)}.")
    missing = [k for k in required if k not in params]
    if missing:
        raise ActionError(f"Missing parameter(s) {missing} for {name}.")
    if name == "file_editor" and params["command"] not in EDITOR_COMMANDS:
        raise ActionError(f"file_editor command {params['command']!r} is not one of {list(EDITOR_COMMANDS)}.")
    return Action(name, params)


def format_action(function: str, **params: str) -> str:
    """An action block (scripted agents, tests, SFT trajectories)."""
    inner = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return f"<function={function}>\n{inner}</function>"


COMPACT_INSTRUCTIONS = """One tool call per turn: <function=NAME><parameter=KEY>VALUE</parameter></function>
file_editor: command (view | str_replace | create | insert | undo_edit), path, old_str, new_str, file_text
search: search_term; execute_bash: command; finish: submit."""


def tool_instructions(compact: bool = False) -> str:
    """The tools as the system prompt describes them (`compact`: their syntax only, for tiny CPU policies)."""
    if compact:
        return COMPACT_INSTRUCTIONS
    return """You can call one tool per turn, in this format:
<function=NAME>
<parameter=KEY>VALUE</parameter>
</function>

Tools:
- file_editor: command (view | create | str_replace | insert | undo_edit), path; view_range "START END" for view;
  file_text for create; old_str (must occur exactly once) and new_str for str_replace; insert_line and new_str
  for insert (after that line; 0 = the top); undo_edit reverts the last edit of path.
- search: search_term, path (optional): lines containing the term, with file and line number.
- execute_bash: command: one shell command in the repository (no network; installs and servers are refused).
- finish: submit your changes (the repository's git diff) and end the episode."""
