"""Normalization: samples that differ in formatting, comments, docstrings or where a new function lands vote
alike; different changes do not."""

from swerl_jax.eval.agentless import normalize, repair

OLD = 'def f(x):\n    """Add one."""\n    return x + 1\n'


def key(new, old=OLD):
    made = repair.answer_patch(
        f"```python\n### m.py\n<<<<<<< SEARCH\n{old.rstrip()}\n=======\n{new.rstrip()}\n>>>>>>> REPLACE\n```",
        {"m.py": old})
    return normalize.normalize_patch(made["model_patch"], made["original_file_content"], made["new_file_content"],
                                     made["edited_files"])


def test_formatting_comments_and_docstrings_do_not_change_the_key():
    a = key('def f(x):\n    """Add one."""\n    return x + 2\n')
    b = key("def f(x):\n    # now two\n    return (x+2)\n")
    assert a and a == b
    assert key("def f(x):\n    return x + 3\n") != a


def test_where_a_new_function_lands_does_not_matter():
    old = "def f(x):\n    return x + 1\n\n\ndef h():\n    return 2\n"
    first = key("def g():\n    return 0\n\n\n" + old, old)
    middle = key("def f(x):\n    return x + 1\n\n\ndef g():\n    return 0\n\n\ndef h():\n    return 2\n", old)
    assert first and first == middle
    assert all(line.startswith(("+", "-")) for line in first.splitlines())


def test_empty_patch_has_an_empty_key_and_comment_stripping_keeps_code():
    assert normalize.normalize_patch("", [], [], []) == ""
    assert normalize.strip_comments_and_docstrings('x = "a"  # c\n"""doc"""\ny = 1\n') \
        == 'x = "a"  \ny = 1'  # spaces before a comment stay


def test_methods_are_keyed_depth_first_like_the_release():
    # "B.f" names both the nested A.B.f and the top-level B.f; the release's NodeVisitor visits depth-first, so the
    # top-level one (visited last) is the one compared: changing it is a change, not an added function
    nested = "class A:\n    class B:\n        def f(self):\n            return 1\n"
    old = nested + "class B:\n    def f(self):\n        return 2\n"
    new = nested + "class B:\n    def f(self):\n        return 3\ndef h():\n    return 0\n"
    assert normalize.only_adds_functions(old, new) is False
    assert normalize.only_adds_functions(old, old + "def h():\n    return 0\n") is True
