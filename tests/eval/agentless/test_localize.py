"""Localization: the tree shown (Python only, tests dropped except for pytest), sampling of its form, the files
kept from an answer."""

import random

from swerl_jax.eval.agentless import localize
from swerl_jax.eval.structure import build_structure

FILES = {"pkg/__init__.py": "", "pkg/core.py": "def f():\n    pass\n", "pkg/data.json": "{}",
         "tests/test_core.py": "def test_f():\n    pass\n", "pkg/test_util.py": "", "setup.py": ""}


def test_tree_is_python_only_and_drops_tests_except_for_pytest():
    tree = localize.shown_structure(build_structure(FILES), "org__repo-1")
    assert localize.tree_files(tree) == ["pkg/__init__.py", "pkg/core.py", "setup.py"]
    pytest_tree = localize.shown_structure(build_structure(FILES), "pytest-dev__pytest-1")
    assert "tests/test_core.py" in localize.tree_files(pytest_tree)
    assert localize.show_structure(tree) == "pkg\n    __init__.py\n    core.py\nsetup.py\n"


def test_one_sample_asks_for_five_files_several_vary_count_indentation_and_order():
    tree = localize.shown_structure(build_structure(FILES), "org__repo-1")
    prompt, n = localize.localization_prompt("Bug.", tree, 1, random.Random(0))
    assert n == 5 and "at most 5 files" in prompt and "pkg\n    __init__.py" in prompt
    forms = {localize.localization_prompt("Bug.", tree, 4, random.Random(s)) for s in range(40)}
    assert {n for _, n in forms} == {2, 3, 4, 5}
    assert any("pkg\n  " in p for p, _ in forms) and any("setup.py\npkg" in p for p, _ in forms)


def test_found_files_keeps_every_exact_existing_path_in_order_as_the_release():
    files = ["a.py", "b/c.py", "d.py"]
    answer = "```\nb/c.py\nnot/there.py\n a.py\nd.py\na.py\n```"
    # more than the prompt's "at most n" is kept (the release's correct_file_paths), repeats included
    assert localize.found_files(answer, files) == ["b/c.py", "d.py", "a.py"]
    assert localize.found_files("a.py\nd.py\nb/c.py\na.py\nd.py\nb/c.py", files) == ["a.py", "d.py", "b/c.py"] * 2
    assert localize.found_files(answer, files, 2) == ["b/c.py", "d.py"]
