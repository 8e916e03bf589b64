"""Reproduction-script and regression-selection answers, and reading a check run's output."""


from swerl_jax.eval.agentless import tests_gen
from swerl_jax.tasks import specs


def test_reproduction_outcome_is_the_first_marker_printed():
    assert tests_gen.outcome("x\nIssue reproduced\n") == "reproduced"
    assert tests_gen.outcome("Issue resolved\nOther issues") == "resolved"
    assert tests_gen.outcome("Traceback ...") == "other"
    assert tests_gen.reproduction_script("t\n```python\nprint(1)\n```\n```python\nprint(2)\n```") == "print(2)"
    assert tests_gen.reproduction_script("no code") is None


def test_excluded_tests_are_known_candidates_named_by_the_answer():
    candidates = ["t.py::a", "t.py::b", "t.py::c"]
    assert tests_gen.excluded_tests("```\nt.py::b\nt.py::zzz\n```", candidates) == {"t.py::b"}
    assert tests_gen.excluded_tests("t.py::c", candidates) == {"t.py::c"}


def test_check_script_and_its_output_read_back():
    instance = {"instance_id": "pallets__flask-1", "repo": "pallets/flask", "version": "2.0",
                "test_patch": "diff --git a/tests/test_x.py b/tests/test_x.py\n"}
    script, files = tests_gen.check_script(instance, ["print('Issue reproduced')"], run_regression=True)
    assert files == {"reproduce_0.py": "print('Issue reproduced')"}
    assert "$INPUTS/reproduce_0.py" in script and "[ -e tests/test_x.py ]" in script
    c = specs.constants()
    output = ("=== SWERL_JAX REPRO 0 START ===\nIssue resolved\n=== SWERL_JAX REPRO 0 END ===\n"
              f"{c.START_TEST_OUTPUT}\nPASSED tests/test_x.py::a\nFAILED tests/test_x.py::b\n{c.END_TEST_OUTPUT}\n")
    outcomes, failed = tests_gen.read_check(instance, output, 1, ["tests/test_x.py::a", "tests/test_x.py::b",
                                                                  "tests/test_x.py::c"])
    assert outcomes == ["resolved"] and failed == ["tests/test_x.py::b", "tests/test_x.py::c"]
