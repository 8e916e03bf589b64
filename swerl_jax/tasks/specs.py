"""SWE-bench's own spec tables and log parsers, imported from the `swebench` package (not retyped).

`swebench/__init__.py` imports docker, modal, datasets and GitHub clients that the harness never uses, so the
package is installed with `pip install --no-deps swebench==4.1.0` (make install-dev does) and only the modules
with no third-party imports are loaded: `harness.constants` (MAP_REPO_VERSION_TO_SPECS, requirement paths, test
status names) and `harness.log_parsers.python` (per-repository log parsers). The requirement files the specs
name are read from the local clone at the environment commit, never from the network.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable

import unidiff

INSTALL_HINT = "pip install --no-deps swebench==4.1.0 (make install-dev does)"
# swebench replaces requirement lines that were yanked from PyPI (harness/test_spec/python.py, which needs network
# clients to import); same table, same effect.
_REPLACE_REQ_PACKAGES = [("types-pkg_resources", "types-setuptools")]
_EXCLUDED_REQ_PREFIXES = ("-e .", "#", ".[test")


class SpecError(ValueError):
    """An instance the SWE-bench tables cannot set up (unknown repository or version, missing requirements)."""


def _bare_package(name: str, path: str) -> None:
    """Register a package module without running its __init__ (which would import the unused heavy clients)."""
    if name not in sys.modules:
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module


_import_lock = threading.Lock()


def _modules() -> tuple[types.ModuleType, types.ModuleType]:
    # Harness workers are threads: import once, under a lock (a half-registered package breaks find_spec).
    with _import_lock:
        return _import_modules()


@functools.cache
def _import_modules() -> tuple[types.ModuleType, types.ModuleType]:
    loaded = sys.modules.get("swebench")
    if loaded is not None and getattr(loaded, "__path__", None):
        root = list(loaded.__path__)[0]
    else:
        spec = importlib.util.find_spec("swebench")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"the SWE-bench spec tables need the swebench package: {INSTALL_HINT}")
        root = spec.submodule_search_locations[0]
    _bare_package("swebench", root)
    _bare_package("swebench.harness", f"{root}/harness")
    _bare_package("swebench.harness.log_parsers", f"{root}/harness/log_parsers")
    _bare_package("swebench.harness.test_spec", f"{root}/harness/test_spec")
    if "swebench.harness.test_spec.test_spec" not in sys.modules:
        # The Python log parsers import TestSpec only for a type annotation (they never read it).
        annotation_only = types.ModuleType("swebench.harness.test_spec.test_spec")
        annotation_only.TestSpec = dict
        sys.modules["swebench.harness.test_spec.test_spec"] = annotation_only
    constants = importlib.import_module("swebench.harness.constants")
    parsers = importlib.import_module("swebench.harness.log_parsers.python")
    return constants, parsers


def constants() -> types.ModuleType:
    """swebench.harness.constants (spec tables, TestStatus, log markers)."""
    return _modules()[0]


def env_spec(repo: str, version: str) -> dict:
    """The SWE-bench install/test spec of (repo, version), or SpecError naming what is missing."""
    table = constants().MAP_REPO_VERSION_TO_SPECS
    if repo not in table:
        raise SpecError(f"repository {repo!r} has no SWE-bench spec (known: {len(table)} repositories)")
    if str(version) not in table[repo]:
        raise SpecError(f"{repo} has no SWE-bench spec for version {version!r} (known: {sorted(table[repo])})")
    return dict(table[repo][str(version)])


def instance_spec(instance: dict) -> dict:
    """An instance's install/test spec: its own `spec` field where it has one (a generated task from a repository
    SWE-bench does not know: `swerl_jax.tasks.infer_spec`), else SWE-bench's table's for (repo, version). Both go
    through the same environment build, install and test steps."""
    own = instance.get("spec")
    if own is None:
        return env_spec(instance["repo"], instance["version"])
    missing = sorted({"python", "install", "test_cmd"} - set(own)) if isinstance(own, dict) else ["(not a dict)"]
    if missing:
        raise SpecError(f"instance {instance.get('instance_id')!r}: field 'spec' lacks {missing}")
    return dict(own)


def instance_log_parser(instance: dict) -> Callable[[str], dict[str, str]]:
    """The log parser for an instance: SWE-bench's generic pytest parser for one with its own `spec` (its test
    command is pytest -rA), else the repository's own (`log_parser`)."""
    if instance.get("spec") is None:
        return log_parser(instance["repo"])
    parse = _modules()[1].parse_log_pytest
    return lambda log: parse(log, None)


def log_parser(repo: str) -> Callable[[str], dict[str, str]]:
    """SWE-bench's log parser for a Python repository: test log -> {test name: PASSED/FAILED/...}."""
    parser = _modules()[1].MAP_REPO_TO_PARSER_PY.get(repo)
    if parser is None:
        raise SpecError(f"repository {repo!r} has no SWE-bench log parser")
    return lambda log: parser(log, None)


def _git_show(git_dir: str, commit: str, path: str) -> str | None:
    result = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True
    )
    return result.stdout if result.returncode == 0 else None


def commit_time(git_dir: str, commit: str) -> str:
    """`commit`'s committer date in a local git dir, as `YYYY-MM-DDTHH:MM:SSZ` (UTC); SpecError when absent."""
    result = subprocess.run(["git", "--git-dir", git_dir, "show", "-s", "--format=%ct", commit, "--"],
                            capture_output=True, text=True)
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        raise SpecError(f"commit {commit} is not in {git_dir}: {result.stderr.strip()[:200]}")
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(result.stdout.strip())))


def requirements_from_clone(git_dir: str, repo: str, commit: str) -> str:
    """The requirements text SWE-bench installs for `repo` at `commit`, read from a local git dir.

    Follows the repository's requirement paths in order, inlines `-r` includes (relative to the file's folder),
    drops editable self-installs and comments, and replaces yanked packages, as the official harness does.
    """
    paths = constants().MAP_REPO_TO_REQS_PATHS.get(repo)
    if not paths:
        raise SpecError(f"{repo} has no requirements paths in MAP_REPO_TO_REQS_PATHS")
    for path in paths:
        text = _git_show(git_dir, commit, path)
        if text is not None:
            break
    else:
        raise SpecError(f"none of {paths} exists in {git_dir} at {repo}@{commit}")
    req_dir = path.rsplit("/", 1)[0] if "/" in path else ""

    def keep(line: str) -> bool:
        return not line.strip().startswith(_EXCLUDED_REQ_PREFIXES)

    included, own = [], []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            name = line.strip()[2:].strip()
            extra = _git_show(git_dir, commit, f"{req_dir}/{name}" if req_dir else name)
            if extra is not None:
                included += [x for x in extra.split("\n") if keep(x)]
        elif keep(line):
            own.append(line)
    requirements = "\n".join(included + ["\n".join(own)])
    for old, new in _REPLACE_REQ_PACKAGES:
        requirements = re.sub(rf"^{re.escape(old)}([<>=!~]=?.*|$)", new, requirements, flags=re.MULTILINE)
    return requirements


def test_directives(instance: dict) -> list[str]:
    """The test files the official harness passes to the test command: those the test patch touches."""
    files = re.findall(r"diff --git a/.* b/(.*)", instance["test_patch"])
    non_test = tuple(constants().NON_TEST_EXTS)
    return [f for f in files if not f.endswith(non_test)]


def test_patch_files(test_patch: str) -> list[str]:
    """Existing files a test patch modifies (reset to the base commit before it is applied)."""
    return [f.source_file[2:] for f in unidiff.PatchSet(test_patch) if f.source_file.startswith("a/")]
