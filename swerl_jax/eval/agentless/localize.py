"""File localization: the repository tree shown to the model, and the files it names.

As the release: non-Python files and (except for pytest's own repository) files and folders whose name starts with
`test` are dropped from the tree; with one sample the model is asked for 5 files with a 4-space tree in the
repository's order, with several samples each sample draws its own number of files (2-5), indentation (2 or 4) and
a shuffled tree order; the answer (the `<solution>` part for thinking models) is split into lines and only lines
that are exactly a file of the tree are kept, in the model's order, every match (a model that names more files than
the prompt's "at most n" keeps them all, as in the release: the repair context's token budget bounds them).
"""

from __future__ import annotations

import copy
import random

from swerl_jax.eval.structure import is_file_entry

LOCALIZATION = """
Please look through a given GitHub issue and repository structure and provide a list of files that one would need to edit or look at to solve the issue.

### GitHub Problem Description ###
{problem_statement}

###

### Repository Structure ###
{structure}


###

Only provide the full path and return at most {n} files. The returned files should be separated by new lines ordered by most to least important and wrapped with ```. For example:

```
most/important/file1.xx
less/important/file2.yy
least/important/file3.zz
```
""".strip()  # noqa: E501  (the release's prompt, verbatim)


def python_only(structure: dict) -> dict:
    """A copy without non-Python files and without folders left empty."""
    out = {}
    for name, value in structure.items():
        if is_file_entry(value):
            if name.endswith(".py"):
                out[name] = value
        elif isinstance(value, dict):
            sub = python_only(value)
            if sub:
                out[name] = sub
    return out


def without_tests(structure: dict) -> dict:
    """A copy without the entries (files or folders, any depth) whose name starts with `test`."""
    return {name: (value if is_file_entry(value) else without_tests(value))
            for name, value in structure.items() if not name.startswith("test")}


def shown_structure(structure: dict, instance_id: str) -> dict:
    """The tree the model sees: Python files, tests dropped unless the instance is pytest's own."""
    tree = python_only(copy.deepcopy(structure))
    return tree if instance_id.startswith("pytest") else without_tests(tree)


def show_structure(structure: dict, indentation: int = 4, rng: random.Random | None = None, level: int = 0) -> str:
    """The tree as indented names, one per line; `rng` shuffles each folder's entries."""
    items = list(structure.items())
    if rng is not None:
        rng.shuffle(items)
    text = ""
    for name, value in items:
        if "." in name and ".py" not in name:
            continue
        text += " " * (level * indentation) + name + "\n"
        if isinstance(value, dict) and not is_file_entry(value):
            text += show_structure(value, indentation, rng, level + 1)
    return text


def tree_files(structure: dict, prefix: str = "") -> list[str]:
    """Every file path of the tree, in its order."""
    out = []
    for name, value in structure.items():
        path = f"{prefix}/{name}" if prefix else name
        out += [path] if is_file_entry(value) else tree_files(value, path)
    return out


def localization_prompt(problem_statement: str, structure: dict, num_samples: int,
                        rng: random.Random) -> tuple[str, int]:
    """One sample's prompt and the number of files it asks for."""
    randomize = num_samples > 1
    n = rng.randint(2, 5) if randomize else 5
    indentation = rng.choice([2, 4]) if randomize else 4
    tree = show_structure(structure, indentation, rng if randomize else None).strip()
    return LOCALIZATION.format(problem_statement=problem_statement, structure=tree, n=n).strip(), n


def found_files(answer: str, files: list[str], limit: int | None = None) -> list[str]:
    """The answer's lines that are files of the tree, in the model's order (at most `limit` when one is given; the
    pipeline gives none, as the release)."""
    known = set(files)
    return [line for line in answer.strip().split("\n") if line in known][:limit]
