"""A spec for a repository SWE-bench does not know, read from its packaging files at a commit.

    spec = infer_spec(files, commit_date, overrides={"python": "3.11"})

It has the keys SWE-bench's spec tables use (`python`, `pip_packages`, `install`, `test_cmd`), so a generated
instance that carries it (`instance["spec"]`, read by `tasks.specs.instance_spec`) builds its environment, installs
and runs its tests through the same path as a SWE-bench instance; its unpinned requirements resolve against the
dated index as of the instance's `created_at` (the commit's date). Where it came from:
- python: the newest `Programming Language :: Python :: 3.X` classifier released by the commit's date that the
  `requires-python` / `python_requires` bound allows, else the newest such release;
- pip_packages: the runtime dependencies (project.dependencies, install_requires, requirements.txt), the test
  extras or groups (test/tests/testing), test requirement files and tox's [testenv] deps, minus linters and docs
  tools, plus pytest and the build backend (the install is `--no-build-isolation`: the env holds it);
- install: `pip install --no-deps --no-build-isolation -e .` (dependencies are the env's, resolved once);
- test_cmd: pytest with `-rA` (the summary SWE-bench's parser reads) and short tracebacks (the statements quote them).
A user's `overrides` replace any key; `inferred` records which keys came from which file.
"""

from __future__ import annotations

import ast
import configparser
import datetime as dt
import re
import tomllib

# CPython 3.x release days: the newest version a commit could have been tested on. It stops at 3.13, the newest
# interpreter the env builder finds here (pyenv); a repository that wants 3.14 gets 3.13 unless --spec says so.
RELEASES = {"3.7": "2018-06-27", "3.8": "2019-10-14", "3.9": "2020-10-05", "3.10": "2021-10-04",
            "3.11": "2022-10-24", "3.12": "2023-10-02", "3.13": "2024-10-07"}
TEST_CMD = "pytest --no-header -rA --tb=short -p no:cacheprovider"
INSTALL = "python -m pip install --no-deps --no-build-isolation -e ."
_TEST_EXTRAS = ("test", "tests", "testing")
_TOOLS = re.compile(r"^(flake8|black|isort|mypy|pylint|ruff|pre-commit|sphinx|tox|twine|coverage|codecov|"
                    r"pyright|pytype|bandit|docutils|readthedocs|furo|myst|check-manifest|build|nox|ipython)",
                    re.IGNORECASE)
REQ_FILES = ("requirements.txt", "requirements-test.txt", "requirements_test.txt", "test-requirements.txt",
              "test_requirements.txt", "requirements/test.txt", "requirements/tests.txt", "requirements-dev.txt",
              "requirements/dev.txt", "dev-requirements.txt", "tests/requirements.txt", "test/requirements.txt")
KEYS = ("python", "pip_packages", "install", "test_cmd", "pre_install")


class SpecInferenceError(ValueError):
    """A repository whose spec cannot be inferred (no packaging file), naming what was looked for."""


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:2])


def allows(bound: str, version: str) -> bool:
    """Whether a requires-python bound (">=3.8, !=3.9.*, <4") allows Python `version` ("3.11")."""
    want = _version_tuple(version)
    for clause in (c.strip() for c in bound.split(",") if c.strip()):
        match = re.match(r"(~=|==|!=|>=|<=|>|<)\s*([\d.*]+)", clause)
        if not match:
            continue
        op, ver = match.groups()
        have = _version_tuple(ver.replace("*", "0"))[:2]
        wildcard = ver.endswith("*")
        if op == "!=" and wildcard and want[:len(have)] == have:
            return False
        ok = {">=": want >= have, ">": want > have if len(have) > 1 else want[:1] > have, "<": want < have,
              "<=": want <= have, "==": want[:len(have)] == have, "~=": want >= have, "!=": True}[op]
        if not ok:
            return False
    return True


def _requirement_lines(text: str) -> list[str]:
    lines = [line.split("#")[0].strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith(("-", "."))]


_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*([<>=!~]=?[^:/]*)?$")


def is_requirement(line: str) -> bool:
    """Whether a line is a PyPI requirement pip can resolve from an index: a name, extras, version bounds and a
    marker; not a URL, a local path, or a tox factor-conditional line ("click7: click<8")."""
    head = line.split(";", 1)[0].strip()
    return bool(_REQUIREMENT.match(head))


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def infer_spec(files: dict[str, str], commit_date: str, overrides: dict | None = None) -> dict:
    """The spec of a repository from its top-level packaging files ({path: text}) at a commit of `commit_date`
    (ISO). Raises SpecInferenceError when none of pyproject.toml/setup.cfg/setup.py is present; an override
    key outside KEYS is an error naming it."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(KEYS))
    if unknown:
        raise SpecInferenceError(f"spec override key(s) {unknown}: must be among {list(KEYS)}")
    if not any(name in files for name in ("pyproject.toml", "setup.cfg", "setup.py")):
        raise SpecInferenceError("no pyproject.toml, setup.cfg or setup.py at the repository's root: pass "
                                 f"--spec with {list(KEYS)}")
    sources: dict[str, str] = {}
    wanted: list[str] = []
    classifiers: list[str] = []
    bound = ""
    backend = ["setuptools", "wheel"]
    if "pyproject.toml" in files:
        try:
            data = tomllib.loads(files["pyproject.toml"])
        except tomllib.TOMLDecodeError as err:
            raise SpecInferenceError(f"pyproject.toml does not parse: {err}") from None
        project = data.get("project", {})
        bound = project.get("requires-python", "") or bound
        classifiers += project.get("classifiers", [])
        wanted += project.get("dependencies", [])
        extras = project.get("optional-dependencies", {})
        groups = data.get("dependency-groups", {})
        for name in _TEST_EXTRAS:
            wanted += [x for x in extras.get(name, []) + groups.get(name, []) if isinstance(x, str)]
        requires = data.get("build-system", {}).get("requires")
        if requires:
            backend = list(requires)
        sources["pyproject.toml"] = "requires-python, dependencies, test extras, build backend"
    if "setup.cfg" in files:
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read_string(files["setup.cfg"])
        except configparser.Error as err:
            raise SpecInferenceError(f"setup.cfg does not parse: {err}") from None
        if cfg.has_section("options"):
            bound = bound or cfg.get("options", "python_requires", fallback="")
            wanted += _requirement_lines(cfg.get("options", "install_requires", fallback=""))
        if cfg.has_section("options.extras_require"):
            for name in _TEST_EXTRAS:
                wanted += _requirement_lines(cfg.get("options.extras_require", name, fallback=""))
        if cfg.has_section("metadata"):
            classifiers += _requirement_lines(cfg.get("metadata", "classifiers", fallback=""))
        sources["setup.cfg"] = "python_requires, install_requires, test extras"
    if "setup.py" in files:
        text = files["setup.py"]
        found = re.search(r"python_requires\s*=\s*['\"]([^'\"]+)['\"]", text)
        bound = bound or (found.group(1) if found else "")
        classifiers += re.findall(r"['\"](Programming Language :: Python :: [\d.]+)['\"]", text)
        wanted += setup_py_requirements(text)
        sources["setup.py"] = "python_requires, classifiers, install_requires, test extras"
    for name in REQ_FILES:
        if name in files:
            wanted += _requirement_lines(files[name])
            sources[name] = "requirements"
    if "tox.ini" in files:
        tox = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            tox.read_string(files["tox.ini"])
            wanted += [x for x in _requirement_lines(tox.get("testenv", "deps", fallback="")) if "{" not in x]
            sources["tox.ini"] = "[testenv] deps"
        except configparser.Error:
            pass
    python = choose_python(bound, classifiers, commit_date)
    packages, seen = [], set()
    for requirement in ["pytest", *wanted, *backend]:
        name = _name(requirement)
        if name and name not in seen and not _TOOLS.match(name) and is_requirement(requirement):
            seen.add(name)
            packages.append(requirement.strip())
    spec = {"python": python, "packages": "", "pip_packages": packages, "install": INSTALL,
            "test_cmd": TEST_CMD, "pre_install": []}
    spec.update(overrides)
    spec["inferred"] = {"from": sources, "requires_python": bound, "overridden": sorted(overrides)}
    return spec


def setup_py_requirements(text: str) -> list[str]:
    """install_requires and the test extras of a setup.py's `setup(...)` call, where they are literals (read with
    `ast`, never run: a setup.py is the repository's code)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup"):
            continue
        for keyword in node.keywords:
            try:
                value = ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                continue
            if keyword.arg == "install_requires" and isinstance(value, (list, tuple)):
                found += [x for x in value if isinstance(x, str)]
            elif keyword.arg == "extras_require" and isinstance(value, dict):
                for name in _TEST_EXTRAS:
                    found += [x for x in value.get(name, []) if isinstance(x, str)]
    return found


def choose_python(bound: str, classifiers: list[str], commit_date: str) -> str:
    """The newest 3.x classifier released by `commit_date` that `bound` allows, else the newest allowed release
    of that date (3.7 for a commit before 3.7's release)."""
    day = dt.date.fromisoformat(commit_date[:10])
    released = [v for v, d in RELEASES.items() if dt.date.fromisoformat(d) <= day and allows(bound, v)]
    listed = {m for c in classifiers for m in re.findall(r"Python :: (3\.\d+)$", c.strip())}
    among = [v for v in released if v in listed] or released or ["3.7"]
    return max(among, key=_version_tuple)


def packaging_files(all_files: dict[str, str]) -> dict[str, str]:
    """The files `infer_spec` reads, from a snapshot's {path: text} (non-Python files are read by the caller)."""
    names = ("pyproject.toml", "setup.cfg", "setup.py", "tox.ini", *REQ_FILES)
    return {k: v for k, v in all_files.items() if k in names}
