"""An oracle backend: answers Agentless Mini's prompts with an instance's gold change, to check the scaffold.

Localization is answered with the gold patch's files, repair with the gold patch's hunks written as SEARCH/REPLACE
edits (each hunk's old lines -> its new lines), reproduction with a given script, regression selection with no
exclusions. With this backend every instance the harness calibrates as gold-resolved must resolve: a failure is
the scaffold's (parsing, edit application, diffing, ranking), not the model's.
"""

from __future__ import annotations

from collections.abc import Sequence

import unidiff

from swerl_jax.answer import format_answer, format_edit_block
from swerl_jax.eval.agentless.localize import LOCALIZATION
from swerl_jax.eval.agentless.tests_gen import REGRESSION_SELECTION, REPRODUCTION

_LOCALIZE = LOCALIZATION.split("\n")[0]
_REPRODUCE = REPRODUCTION.split("\n")[-1]
_SELECT = REGRESSION_SELECTION.split("\n")[-1]


def patch_edits(patch: str) -> list[tuple[str, str, str]]:
    """(path, search, replace) per hunk of a unified diff (modified files only)."""
    edits = []
    for f in unidiff.PatchSet(patch):
        if f.is_added_file or f.is_removed_file:
            raise ValueError(f"{f.path}: a new or deleted file cannot be written as a SEARCH/REPLACE edit")
        for hunk in f:
            old = "".join(line.value for line in hunk if not line.is_added)
            new = "".join(line.value for line in hunk if not line.is_removed)
            edits.append((f.path, old.rstrip("\n"), new.rstrip("\n")))
    return edits


class OracleChat:
    """Answers each conversation by its prompt's kind, from the gold patch of the instance it names."""

    def __init__(self, instances: Sequence[dict], reproduction_scripts: dict[str, str] | None = None) -> None:
        self.instances = list(instances)
        self.scripts = reproduction_scripts or {}

    def _instance(self, prompt: str) -> dict:
        for inst in self.instances:
            if inst["problem_statement"].strip() and inst["problem_statement"].strip() in prompt:
                return inst
        raise KeyError("the prompt names no known instance's problem statement")

    def _answer(self, prompt: str) -> str:
        inst = self._instance(prompt)
        edits = patch_edits(inst["patch"])
        if prompt.startswith(_LOCALIZE):
            files = "\n".join(dict.fromkeys(path for path, _, _ in edits))
            return format_answer("The files the gold patch changes.", [f"```\n{files}\n```"])
        if prompt.endswith(_REPRODUCE):
            script = self.scripts.get(inst["instance_id"], "print('Other issues')")
            return format_answer("A reproduction script.", [f"```python\n{script}\n```"])
        if prompt.endswith(_SELECT):
            return format_answer("None of them.", ["```\n\n```"])
        if "*SEARCH/REPLACE* edits" in prompt:
            return format_answer("The gold edits.", [format_edit_block(p, s, r) for p, s, r in edits])
        raise ValueError(f"unknown prompt kind: {prompt[:80]!r}")

    def __call__(self, conversations: Sequence[list[dict]], temperature: float) -> list[str]:
        return [self._answer(c[-1]["content"]) for c in conversations]

