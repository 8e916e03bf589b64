"""The SWE-RL prompt: the "thinking" system prompt, the Agentless repair prompt with file blocks, a context budget.

The three strings below reproduce the official release word for word: facebookresearch/swe-rl,
``src/swerl/core/prompts.py`` (THINKING_SYSTEM, AGENTLESS_REPAIR, CODE_FILE). As in the release's
``agentless_mini/repair.py``, file blocks are ``### path\\n<content>`` joined by a blank line, the user message is
``AGENTLESS_REPAIR.format(problem_statement=..., content=...).strip()`` and the system message is THINKING_SYSTEM;
the chat template of the tokenizer renders them.

Budget: when the rendered prompt is longer than ``max_prompt_len`` tokens, files go in this order, each decision
recorded with its reason: (1) relevant-but-unmodified files are dropped, largest first; (2) the modified files
are cut to the lines the PR changes plus the most context lines that fit, each run of omitted lines shown as one
"..." line (as Agentless shows code segments); (3) if even the changed
lines alone do not fit, the prompt is marked ``fits=False`` (the loader's length filter counts and drops it).
"""

from __future__ import annotations

import dataclasses
import difflib

import numpy as np

from swerl_jax.chat import encode_parts, encode_text, template_parts
from swerl_jax.data.records import changed_paths

# Source: facebookresearch/swe-rl, src/swerl/core/prompts.py (THINKING_SYSTEM), reproduced exactly.
THINKING_SYSTEM = """
A user will ask you to solve a task. You should first draft your thinking process (inner monologue). Then, generate the solution.

Your response format must follow the template below:
<think>
Your thoughts or/and draft, like working through an exercise on scratch paper. Be as casual and as long as you want until you are confident to generate a correct solution.
</think>
<solution>
Final solution presented to the user.
</solution>
""".strip()  # noqa: E501

# Source: facebookresearch/swe-rl, src/swerl/core/prompts.py (AGENTLESS_REPAIR), reproduced exactly.
AGENTLESS_REPAIR = """We are currently solving the following issue within our repository. Here is the issue text:
--- BEGIN ISSUE ---
{problem_statement}
--- END ISSUE ---

Below are some code segments, each from a relevant file. One or more of these files may contain bugs.

--- BEGIN FILE ---
```
{content}
```
--- END FILE ---

Please first localize the bug based on the issue statement, and then generate *SEARCH/REPLACE* edits to fix the issue.

Every *SEARCH/REPLACE* edit must use this format:
1. The file path
2. The start of search block: <<<<<<< SEARCH
3. A contiguous chunk of lines to search for in the existing source code
4. The dividing line: =======
5. The lines to replace into the source code
6. The end of the replace block: >>>>>>> REPLACE

Here is an example:

```python
### mathweb/flask/app.py
<<<<<<< SEARCH
from flask import Flask
=======
import math
from flask import Flask
>>>>>>> REPLACE
```

Please note that the *SEARCH/REPLACE* edit REQUIRES PROPER INDENTATION. If you would like to add the line '        print(x)', you must fully write that out, with all those spaces before the code!
Wrap each *SEARCH/REPLACE* edit in a code block as shown in the example above. If you have multiple *SEARCH/REPLACE* edits, use a separate code block for each one."""  # noqa: E501

# Source: facebookresearch/swe-rl, src/swerl/core/prompts.py (CODE_FILE).
CODE_FILE = """
### {path}
{content}
""".strip()

# A short variant of the same task and answer format for CPU-sized demos (tiny_cpu): the release's prompt is
# ~380 SmolLM2 tokens of instructions, which dominates a 7M-parameter policy's step time on two cores.
COMPACT_SYSTEM = "Think in <think>...</think>, then answer in <solution>...</solution>."
COMPACT_REPAIR = """Issue:
{problem_statement}

{content}

Fix the issue with *SEARCH/REPLACE* edits (### path, <<<<<<< SEARCH, =======, >>>>>>> REPLACE) in ``` blocks."""

PROMPT_STYLES = ("swe_rl", "compact")


@dataclasses.dataclass(frozen=True)
class FileDecision:
    """What the budget did with one file of the record's code context."""

    path: str
    action: str  # kept | dropped | truncated
    reason: str
    tokens: int  # tokens of the file block as shown (0 when dropped, -1 when the whole prompt fitted uncounted)
    lines: tuple[int, int] | None = None  # 1-based inclusive line range shown, when truncated


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A rendered prompt: chat text, token ids and the budget decisions."""

    text: str
    ids: np.ndarray  # int32 [num_tokens]
    fits: bool  # False: longer than max_prompt_len even with every cut
    decisions: tuple[FileDecision, ...]
    max_prompt_len: int

    @property
    def num_tokens(self) -> int:
        """Length of the prompt in tokens."""
        return int(self.ids.shape[0])

    @property
    def shown_files(self) -> list[str]:
        """Paths shown (whole or truncated), in prompt order."""
        return [d.path for d in self.decisions if d.action != "dropped"]


def file_blocks(files: list[tuple[str, str]]) -> str:
    """`### path\\n<content>` blocks joined by a blank line, as the release's repair step joins them."""
    return "\n\n".join(CODE_FILE.format(path=p, content=c) for p, c in files)


def messages_for(problem_statement: str, files: list[tuple[str, str]], style: str = "swe_rl"
                 ) -> list[dict[str, str]]:
    """The chat messages: THINKING_SYSTEM, then the repair prompt with the issue and the file blocks
    (style "compact": the short instructions above, same file blocks and answer format)."""
    system, repair = (THINKING_SYSTEM, AGENTLESS_REPAIR) if style == "swe_rl" else (COMPACT_SYSTEM, COMPACT_REPAIR)
    user = repair.format(problem_statement=problem_statement, content=file_blocks(files)).strip()
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def render(tokenizer, messages: list[dict[str, str]]) -> tuple[str, np.ndarray]:
    """Chat-template text (with the assistant generation prompt) and its int32 token ids."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat template (model.tokenizer)")
    parts = template_parts(tokenizer, messages)
    # The issue and the code are the repository's text: a role token's string in them is characters, never a
    # control id (`chat.render_ids`); the template's own BOS/role tokens are its structure.
    return "".join(p for p, _ in parts), np.asarray(encode_parts(tokenizer, parts), dtype=np.int32)


def _count(tokenizer, text: str) -> int:
    return len(encode_text(tokenizer, text))


def _changed_spans(old: str, new: str | None) -> list[tuple[int, int]]:
    """0-based half-open line ranges of `old` that the change touches (the whole file when unknown)."""
    a = old.split("\n")
    if new is None:
        return [(0, len(a))]
    ops = difflib.SequenceMatcher(None, a, new.split("\n"), autojunk=False).get_opcodes()
    # A pure insertion touches no old line: show the line before which it goes, or the last line when it goes at
    # the end (lines appended to a file without a final newline insert at len(a), past every old line).
    last = len(a) - 1
    spans = [(min(i1, last), max(i2, min(i1, last) + 1)) for tag, i1, i2, _, _ in ops if tag != "equal"]
    return spans or [(0, len(a))]


def _window(content: str, spans: list[tuple[int, int]], k: int) -> tuple[str, tuple[int, int]]:
    """The lines within `k` of a changed line; each run of omitted lines becomes one "..." line (as Agentless
    shows code segments). Returns the text and the 1-based first/last line shown."""
    lines = content.split("\n")
    keep = [False] * len(lines)
    for lo, hi in spans:
        for i in range(max(0, lo - k), min(len(lines), hi + k)):
            keep[i] = True
    out, skipping = [], False
    for line, kept in zip(lines, keep):
        if kept:
            out.append(line)
            skipping = False
        elif not skipping:
            out.append("...")
            skipping = True
    shown = [i for i, kept in enumerate(keep) if kept]
    return "\n".join(out), (shown[0] + 1, shown[-1] + 1)


def _check_settings(max_prompt_len: int, style: str) -> None:
    if style not in PROMPT_STYLES:
        raise ValueError(f"data.prompt_style {style!r} is not one of {PROMPT_STYLES}")
    if max_prompt_len <= 0:
        raise ValueError(f"data.max_prompt_len must be > 0, got {max_prompt_len}")


def prompt_or_reason(record: dict, tokenizer, max_prompt_len: int, style: str = "swe_rl",
                     too_long: str = "prompt longer than max_prompt_len") -> tuple[Prompt | None, str, str]:
    """`build_prompt`, or why this record cannot be prompted: (prompt, "", "") or (None, reason, detail).

    The reason is a short category for the data/dropped counts ("prompt could not be built (IndexError)", or
    `too_long`, the caller's words for a prompt that does not fit); the detail names the record and the error. A
    record's content never raises here (a training run or an evaluation counts it and goes on); a bad setting
    (style, max_prompt_len) still does.
    """
    _check_settings(max_prompt_len, style)
    try:
        prompt = build_prompt(record, tokenizer, max_prompt_len, style)
    except Exception as e:  # noqa: BLE001 - any record-borne failure is counted, never fatal
        return None, f"prompt could not be built ({type(e).__name__})", \
            f"{record.get('instance_id', '?')}: {type(e).__name__}: {e}"
    if not prompt.fits:
        return None, too_long, \
            f"{record.get('instance_id', '?')}: {prompt.num_tokens} tokens with every cut > {max_prompt_len}"
    return prompt, "", ""


def build_prompt(record: dict, tokenizer, max_prompt_len: int, style: str = "swe_rl") -> Prompt:
    """The SWE-RL prompt of a record within `max_prompt_len` tokens (see the module docstring for the budget).

    Files are shown modified-first (in code_context order), then the relevant-but-unmodified ones.
    """
    _check_settings(max_prompt_len, style)
    ctx = record["code_context"]
    changed = set(changed_paths(record))
    modified = [p for p in ctx if p in changed]
    relevant = [p for p in ctx if p not in changed]
    shown = {p: ctx[p] for p in modified + relevant}
    problem = record["problem_statement"]

    def attempt() -> tuple[str, np.ndarray]:
        return render(tokenizer, messages_for(problem, [(p, c) for p, c in shown.items()], style))

    text, ids = attempt()
    if len(ids) <= max_prompt_len:
        # The common case: one tokenization; per-file counts are not needed (tokens=-1: not counted).
        return Prompt(text, ids, True, tuple(FileDecision(p, "kept", "fits", -1) for p in shown), max_prompt_len)
    block_tokens = {p: _count(tokenizer, CODE_FILE.format(path=p, content=c)) for p, c in shown.items()}
    decisions: dict[str, FileDecision] = {p: FileDecision(p, "kept", "fits", block_tokens[p]) for p in shown}

    full_len = len(ids)
    # Step 1: drop relevant-but-unmodified files, largest first, until the estimate fits.
    for path in sorted(relevant, key=lambda p: -block_tokens[p]):
        if len(ids) <= max_prompt_len:
            break
        del shown[path]
        decisions[path] = FileDecision(
            path, "dropped", f"prompt of {full_len} tokens > max_prompt_len {max_prompt_len}: "
            f"relevant-but-unmodified file of {block_tokens[path]} tokens dropped first", 0)
        text, ids = attempt()
    if len(ids) <= max_prompt_len:
        return Prompt(text, ids, True, tuple(decisions.values()), max_prompt_len)

    # Step 2: cut the modified files to the widest window of lines around the changed lines that fits.
    spans = {p: _changed_spans(ctx[p], record["oracle_new_content"].get(p)) for p in modified}
    fixed = len(ids) - sum(block_tokens[p] for p in modified)

    def estimate(k: int) -> int:
        return fixed + sum(_count(tokenizer, CODE_FILE.format(path=p, content=_window(ctx[p], spans[p], k)[0]))
                           for p in modified)

    lo, hi = 0, max(len(ctx[p].split("\n")) for p in modified) if modified else 0
    if modified and estimate(lo) <= max_prompt_len:
        while lo < hi:  # largest k with estimate(k) <= max_prompt_len
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if estimate(mid) <= max_prompt_len else (lo, mid - 1)
    k = lo
    while True:
        for p in modified:
            shown[p], lines = _window(ctx[p], spans[p], k)
            decisions[p] = FileDecision(
                p, "truncated", f"prompt of {full_len} tokens > max_prompt_len {max_prompt_len}: modified file "
                f"cut to the changed lines with {k} lines of context each side, '...' for the rest", 0, lines)
        text, ids = attempt()
        if len(ids) <= max_prompt_len or k == 0:
            break
        k -= 1  # token merges at block borders can make the estimate a few tokens short
    for p in modified:
        d = decisions[p]
        decisions[p] = dataclasses.replace(d, tokens=_count(tokenizer, CODE_FILE.format(path=p, content=shown[p])))
    return Prompt(text, ids, len(ids) <= max_prompt_len, tuple(decisions.values()), max_prompt_len)
