"""Reproduction tests and regression-test selection, as the original Agentless does them, run in the harness.

Reproduction: the model writes a standalone script that reproduces the issue and prints "Issue reproduced" (the
bug shows), "Issue resolved" (it does not) or "Other issues". A script is kept when on the unpatched repository it
prints "Issue reproduced"; a patch resolves a kept script when the script prints "Issue resolved" on it.
Regression: the instance's PASS_TO_PASS tests that pass on the unpatched repository (Agentless's "tests passing in
the original repo"), minus those the model says a fix may legitimately change; a patch's regression result is how
many of the remaining fail. All runs go through the executor's sandbox (no network, limits, timeouts).
"""

from __future__ import annotations

import re
import shlex

from swerl_jax.tasks import grading, specs

REPRODUCTION = """We are currently solving the following issue within our repository. Here is the issue text:
--- BEGIN ISSUE ---
{problem_statement}
--- END ISSUE ---

Please generate a complete test that can be used to reproduce the issue.

The complete test should contain the following:
1. Necessary imports
2. Code to reproduce the issue described in the issue text
3. Print "Issue reproduced" if the outcome indicates that the issue is reproduced
4. Print "Issue resolved" if the outcome indicates that the issue has been successfully resolved
5. Print "Other issues" if the outcome indicates there are other issues with the source code

Wrap the complete test in ```python...```."""

REGRESSION_SELECTION = """We are currently solving the following issue within our repository. Here is the issue text:
--- BEGIN ISSUE ---
{problem_statement}
--- END ISSUE ---

Below are a list of existing tests in the repository.
```
{tests}
```

Please identify the tests that should not be run after applying the patch to fix the issue.
These tests should be excluded as the original functionality may change due to the patch.

### Example
```
test1
test2
test5
```
Return only the selected tests."""

_PYTHON_BLOCK = re.compile(r"```python\n(.*?)\n```", re.DOTALL)
_ANY_BLOCK = re.compile(r"```(?:\w*)\n(.*?)\n```", re.DOTALL)
_MARK = "=== SWERL_JAX {kind} {index} {edge} ==="


def reproduction_script(answer: str) -> str | None:
    """The last ```python block of the answer (None when there is none)."""
    blocks = _PYTHON_BLOCK.findall(answer)
    return blocks[-1] if blocks else None


def outcome(output: str) -> str:
    """"reproduced", "resolved" or "other" from a reproduction script's output (the first marker printed)."""
    marks = {"Issue reproduced": "reproduced", "Issue resolved": "resolved", "Other issues": "other"}
    found = [(output.find(m), kind) for m, kind in marks.items() if m in output]
    return min(found)[1] if found else "other"


def excluded_tests(answer: str, candidates: list[str]) -> set[str]:
    """The candidate tests the model asks to exclude (lines of its code block, or of the answer)."""
    blocks = _ANY_BLOCK.findall(answer)
    lines = "\n".join(blocks).splitlines() if blocks else answer.splitlines()
    known = set(candidates)
    return {line.strip() for line in lines if line.strip() in known}


def _section(output: str, kind: str, index: int) -> str:
    start, end = _MARK.format(kind=kind, index=index, edge="START"), _MARK.format(kind=kind, index=index, edge="END")
    if start not in output:
        return ""
    return output.split(start, 1)[1].split(end, 1)[0]


def check_script(instance: dict, scripts: list[str], run_regression: bool, per_test_timeout_s: int = 120
                 ) -> tuple[str, dict[str, str]]:
    """The bash script that runs each reproduction script and (optionally) the regression test files, and the
    files it needs, which the sandbox reads at $INPUTS."""
    lines, files = [], {}
    for k, script in enumerate(scripts):
        name = f"reproduce_{k}.py"
        files[name] = script
        lines += [f"echo {shlex.quote(_MARK.format(kind='REPRO', index=k, edge='START'))}",
                  f"timeout {int(per_test_timeout_s)} python \"$INPUTS/{name}\" 2>&1 | tail -c 20000",
                  f"echo {shlex.quote(_MARK.format(kind='REPRO', index=k, edge='END'))}"]
    if run_regression:
        spec = specs.env_spec(instance["repo"], instance["version"])
        consts = specs.constants()
        directives = specs.test_directives(instance)
        lines += ["set --", *[f"[ -e {shlex.quote(d)} ] && set -- \"$@\" {shlex.quote(d)}" if d.endswith(".py")
                              else f"set -- \"$@\" {shlex.quote(d)}" for d in directives],
                  *spec.get("eval_commands", []), f"echo {shlex.quote(consts.START_TEST_OUTPUT)}"]
        test_cmds = spec["test_cmd"] if isinstance(spec["test_cmd"], list) else [spec["test_cmd"]]
        lines += [f"{cmd} \"$@\"" for cmd in test_cmds]
        lines.append(f"echo {shlex.quote(consts.END_TEST_OUTPUT)}")
    return "\n".join(lines) + "\n", files


def read_check(instance: dict, output: str, n_scripts: int, regression_tests: list[str] | None,
               statuses: dict[str, str] | None = None) -> tuple[list[str], list[str] | None]:
    """(each script's outcome, the regression tests that failed or None when regression was not run).
    `statuses`: the regression run's {test id: status} from the trusted plugin's record (`run_script`'s
    `test_statuses`), which printed results cannot forge; else (None) pytest's log is parsed."""
    outcomes = [outcome(_section(output, "REPRO", k)) for k in range(n_scripts)]
    if regression_tests is None:
        return outcomes, None
    if statuses is None:
        test_output = grading.test_output(output)
        statuses = specs.log_parser(instance["repo"])(test_output) if test_output is not None else {}
    ok = {specs.constants().TestStatus.PASSED.value, specs.constants().TestStatus.XFAIL.value}
    return outcomes, [t for t in regression_tests if statuses.get(t) not in ok]
