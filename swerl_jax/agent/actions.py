"""The agent's action format and its parser: R2E-Gym's / DeepSWE's function-call blocks.

    <function=file_editor>
    <parameter=command>str_replace</parameter>
    <parameter=path>src/flask/blueprints.py</parameter>
    <parameter=old_str>...</parameter>
    <parameter=new_str>...</parameter>
    </function>

Any chat template can express it (plain text). The first complete block of a turn is its action; a turn without
one, an unknown function, a missing or unknown parameter is an `ActionError` whose message becomes the
observation: the episode goes on and the error is counted, it never crashes.
"""

from __future__ import annotations

import dataclasses
import re

# function -> (required parameters, optional parameters)
TOOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "file_editor": (("command", "path"), ("file_text", "old_str", "new_str", "insert_line", "view_range")),
    "search": (("search_term",), ("path",)),
    "execute_bash": (("command",), ()),
    "finish": ((), ("result",)),
}
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")

_BLOCK = re.compile(r"<function=([^>\s]*)>(.*?)</function>", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\s]*)>(.*?)</parameter>", re.DOTALL)


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


def parse_action(text: str) -> Action:
    """The turn's first function block as an Action (ActionError when there is none or it is malformed)."""
    match = _BLOCK.search(text)
    if match is None:
        raise ActionError("No function call found. Call exactly one tool per turn: "
                          "<function=NAME><parameter=KEY>VALUE</parameter></function>.")
    name, body = match.group(1), match.group(2)
    if name not in TOOLS:
        raise ActionError(f"Unknown function {name!r}; the tools are {', '.join(TOOLS)}.")
    params: dict[str, str] = {}
    for key, value in _PARAM.findall(body):
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
