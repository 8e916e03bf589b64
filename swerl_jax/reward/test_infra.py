"""Does a patch change how tests run? The one place that decides it, for grading reports and RL alike.

    test_infra_paths(patch)    # ["conftest.py", "setup.cfg"]: the files of `patch` that change how tests run

A patch that adds a `conftest.py` (a pytest hook can rewrite every report to "passed"), changes pytest or tox
settings (`addopts = -p no:...`, `testpaths`, `python_files`), adds `sitecustomize`/`usercustomize` or a `.pth` file
(code run at every interpreter start), or a module that shadows the test runner (`pytest.py`, `unittest.py` at the
repository root) can make tests pass without fixing anything, and the official SWE-bench harness grades it like any
other patch. Such patches are not always cheats (a fix may legitimately touch setup.cfg), so this only names them:
the harness flags them in its report (grading stays official) and the agent's RL reward scores them unresolved when
`agent.test_infra_unresolved` is set (swerl_jax/agent/env.py; agent/resolved_test_infra_rate counts them).
"""

from __future__ import annotations

import re

# Files that change how tests run wherever they are in the tree (pytest collects conftest.py from every folder; a
# .pth or sitecustomize works from any site or path folder).
_ANYWHERE = re.compile(r"(^|/)(conftest\.py|pytest\.ini|tox\.ini|\.pytest\.ini|sitecustomize\.py|usercustomize\.py"
                       r"|[^/]*\.pth)$")
# Modules or packages at the repository root that shadow the test runner when the root is on sys.path first.
_ROOT_SHADOWS = re.compile(r"^(pytest\.py|unittest\.py|_pytest/.*|pytest/.*|unittest/.*|py\.py)$")
# Config files that hold test settings among others: flagged when their part of the patch names a test runner.
_SHARED_CONFIGS = re.compile(r"(^|/)(setup\.cfg|pyproject\.toml)$")
_TEST_SETTINGS = re.compile(r"pytest|tox|addopts|testpaths|python_files|python_classes|python_functions")
_DIFF_HEADER = re.compile(r"^diff --git a/(.*) b/(.*)$")


def _file_sections(patch: str) -> list[tuple[set[str], str]]:
    """(paths, text) per file of a unified diff (git-style or plain): its old and new paths and its diff text."""
    lines = patch.split("\n")
    git_style = any(line.startswith("diff --git ") for line in lines)
    sections: list[tuple[set[str], list[str]]] = []
    in_hunk = False
    for i, line in enumerate(lines):
        header = _DIFF_HEADER.match(line)
        plain = (not git_style and line.startswith("--- ") and i + 1 < len(lines)
                 and lines[i + 1].startswith("+++ "))
        if header or plain:
            sections.append((set(header.groups()) if header else set(), []))
            in_hunk = False
        if not sections:
            continue
        paths, text = sections[-1]
        text.append(line)
        in_hunk = in_hunk or line.startswith("@@")
        if in_hunk:  # a hunk's "--- x" is a removed line, not a path
            continue
        for prefix in ("--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to "):
            if line.startswith(prefix):
                path = line[len(prefix):].split("\t")[0].strip()
                if prefix in ("--- ", "+++ ") and path[:2] in ("a/", "b/"):
                    path = path[2:]
                if path != "/dev/null":
                    paths.add(path)
    return [(paths, "\n".join(text)) for paths, text in sections if paths]


def test_infra_paths(patch: str) -> list[str]:
    """The paths in `patch` (a unified diff) whose change alters how tests run, sorted; [] for none."""
    found = set()
    for paths, text in _file_sections(patch or ""):
        for path in paths:
            path = path.strip().strip('"').removeprefix("./")
            if _ANYWHERE.search(path) or _ROOT_SHADOWS.match(path):
                found.add(path)
            elif _SHARED_CONFIGS.search(path) and _TEST_SETTINGS.search(text):
                found.add(path)
    return sorted(found)


def touches_test_infra(patch: str) -> bool:
    """Whether `patch` changes how tests run (see `test_infra_paths`)."""
    return bool(test_infra_paths(patch))
