"""Spec inference on small synthetic project trees: the Python version, the packages, overrides, and errors."""

from __future__ import annotations

import pytest

from swerl_jax.tasks import infer_spec as inf

PYPROJECT = '''
[build-system]
requires = ["flit_core >=3.2,<4"]
build-backend = "flit_core.buildapi"

[project]
name = "demo"
requires-python = ">=3.9"
dependencies = ["attrs>=21"]
classifiers = ["Programming Language :: Python :: 3.10", "Programming Language :: Python :: 3.12"]

[project.optional-dependencies]
test = ["hypothesis", "black"]
docs = ["sphinx"]
'''


def test_pyproject_gives_python_packages_and_the_build_backend():
    spec = inf.infer_spec({"pyproject.toml": PYPROJECT}, "2024-03-01T00:00:00Z")
    assert spec["python"] == "3.12"  # the newest classifier released by the commit's date
    assert spec["pip_packages"] == ["pytest", "attrs>=21", "hypothesis", "flit_core >=3.2,<4"]  # no black/sphinx
    assert spec["test_cmd"].startswith("pytest") and "-rA" in spec["test_cmd"]
    assert "--no-build-isolation" in spec["install"]
    assert spec["inferred"]["requires_python"] == ">=3.9"


def test_the_commit_date_bounds_the_version():
    assert inf.infer_spec({"pyproject.toml": PYPROJECT}, "2023-01-01T00:00:00Z")["python"] == "3.10"


def test_setup_cfg_and_requirements_and_tox():
    files = {"setup.cfg": "[options]\npython_requires = >=3.7, <3.11\ninstall_requires =\n    six\n"
                          "[options.extras_require]\ntesting =\n    pytest-cov\n",
             "requirements-test.txt": "# comment\nfreezegun==1.2\n-e .\n",
             "tox.ini": "[testenv]\ndeps =\n    mock\n    {env:EXTRA}\n"}
    spec = inf.infer_spec(files, "2025-01-01T00:00:00Z")
    assert spec["python"] == "3.10"  # <3.11 caps it below the newest release
    assert spec["pip_packages"][:5] == ["pytest", "six", "pytest-cov", "freezegun==1.2", "mock"]
    assert set(spec["inferred"]["from"]) == {"setup.cfg", "requirements-test.txt", "tox.ini"}
    # a tests/ folder's own requirements file (as some projects keep it beside the tests)
    spec = inf.infer_spec({"setup.py": "", "tests/requirements.txt": "hypothesis>=6\n"}, "2025-01-01T00:00:00Z")
    assert "hypothesis>=6" in spec["pip_packages"] and "tests/requirements.txt" in spec["inferred"]["from"]


def test_setup_py_python_requires_and_overrides_win():
    files = {"setup.py": "setup(python_requires='>=3.8', classifiers=['Programming Language :: Python :: 3.9'])"}
    spec = inf.infer_spec(files, "2025-01-01T00:00:00Z", {"python": "3.11", "test_cmd": "pytest -rA -x"})
    assert spec["python"] == "3.11" and spec["test_cmd"] == "pytest -rA -x"
    assert spec["inferred"]["overridden"] == ["python", "test_cmd"]
    assert inf.infer_spec(files, "2025-01-01T00:00:00Z")["python"] == "3.9"


def test_bad_input_is_one_clear_error():
    with pytest.raises(inf.SpecInferenceError, match="no pyproject.toml, setup.cfg or setup.py"):
        inf.infer_spec({"README": "x"}, "2025-01-01")
    with pytest.raises(inf.SpecInferenceError, match=r"override key\(s\) \['pyhton'\]"):
        inf.infer_spec({"setup.py": ""}, "2025-01-01", {"pyhton": "3.9"})
    with pytest.raises(inf.SpecInferenceError, match="pyproject.toml does not parse"):
        inf.infer_spec({"pyproject.toml": "[project"}, "2025-01-01")


@pytest.mark.parametrize("bound,version,ok", [(">=3.8", "3.7", False), (">=3.8", "3.12", True),
                                              (">=3.7,!=3.9.*", "3.9", False), ("<3.11", "3.11", False),
                                              ("~=3.8", "3.13", True), ("", "3.10", True)])
def test_requires_python_bounds(bound, version, ok):
    assert inf.allows(bound, version) is ok


def test_urls_paths_and_tox_factor_lines_are_not_requirements():
    files = {"setup.py": "", "tox.ini": "[testenv]\ndeps =\n    -r requirements/tests.txt\n"
             "    git+https://github.com/sphinx-doc/sphinx.git@96dbe5e3\n    click7: click<8\n"
             "    examples/tutorial[test]\n    greenlet ; python_version < '3.11'\n    blinker>=1.4\n"}
    assert inf.infer_spec(files, "2021-06-01")["pip_packages"] == ["pytest", "greenlet ; python_version < '3.11'",
                                                                    "blinker>=1.4", "setuptools", "wheel"]


def test_setup_py_literal_requirements_are_read_without_running_it():
    text = ("from setuptools import setup\nsetup(name='x', install_requires=['Werkzeug>=2.0', 'click'],\n"
            "      extras_require={'tests': ['freezegun'], 'docs': ['sphinx']}, tests_require=compute())\n")
    assert inf.infer_spec({"setup.py": text}, "2021-06-01")["pip_packages"][:4] == ["pytest", "Werkzeug>=2.0",
                                                                                    "click", "freezegun"]
