"""An executor for a tiny synthetic repository that runs its tests in-process (no sandbox, no environment build:
seconds would become minutes), with the `LocalExecutor` interface the validator uses, and injectable faults."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile
import traceback
import types

from swerl_jax.tasks.grading import test_list

CALC = '''def add(a, b):
    return a + b


def is_small(x, limit=10):
    if x < limit:
        return True
    return False


def unused(x):
    return x * 2
'''
TESTS = '''from calc import add, is_small


def test_add():
    assert add(2, 3) == 5


def test_small():
    assert is_small(3)


def test_big():
    assert not is_small(30)
'''


def make_repo(root: pathlib.Path) -> pathlib.Path:
    """A throwaway git repository: calc.py, tests/test_calc.py and a pyproject; returns its path."""
    root.mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(TESTS)
    (root / "pyproject.toml").write_text('[project]\nname = "calc"\nrequires-python = ">=3.8"\n')
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    for cmd in (["init", "-q"], ["add", "-A"], [*env, "commit", "-qm", "calc"]):
        subprocess.run(["git", *cmd], cwd=root, check=True, capture_output=True)
    return root


class InProcessExecutor:
    """Checks the commit out (git archive), applies patches (git apply), imports calc.py and calls each test."""

    def __init__(self, repos_dir: pathlib.Path, fail: str | None = None, gold_unresolved: bool = False):
        self.repos_dir, self.fail, self.gold_unresolved = repos_dir, fail, gold_unresolved
        self.calls: list[str] = []

    def fingerprint(self, instance: dict) -> dict:
        return {"executor": "in-process", "spec": instance["spec"]}

    def _statuses(self, instance: dict, patches: list[str]) -> tuple[dict[str, str], str]:
        git_dir = self.repos_dir / f"{instance['repo'].replace('/', '__')}.git"
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", instance["base_commit"]],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            for n, patch in enumerate(p for p in patches if p.strip()):
                pathlib.Path(tmp, f".p{n}").write_text(patch)
                subprocess.run(["git", "apply", f".p{n}"], cwd=tmp, check=True, capture_output=True)
            module = types.ModuleType("calc")
            exec(compile(pathlib.Path(tmp, "calc.py").read_text(), "calc.py", "exec"), module.__dict__)
            statuses, output = {}, ["=" * 10 + " FAILURES " + "=" * 10]
            test_file = pathlib.Path(tmp, "tests", "test_calc.py")
            if not test_file.exists():
                return {}, ""
            saved = sys.modules.get("calc")
            sys.modules["calc"] = module
            try:
                space: dict = {}
                exec(compile(test_file.read_text(), "tests/test_calc.py", "exec"), space)
            except Exception:  # a collection error, as pytest reports it: no test ran
                return {}, f"ERROR collecting tests/test_calc.py\n{traceback.format_exc()}"
            finally:
                sys.modules.pop("calc")
                if saved is not None:
                    sys.modules["calc"] = saved
            for name, fn in space.items():
                if name.startswith("test_"):
                    try:
                        fn()
                        statuses[f"tests/test_calc.py::{name}"] = "PASSED"
                    except Exception:
                        statuses[f"tests/test_calc.py::{name}"] = "FAILED"
                        output.append(f"{'_' * 5} {name} {'_' * 5}\n{traceback.format_exc()}")
            return statuses, "\n".join(output)

    def run_script(self, instance: dict, patch: str, script: str, log_dir: pathlib.Path, files=None) -> dict:
        self.calls.append("script")
        if self.fail == "script":
            return {"status": "env_failed", "error": "no interpreter (injected)"}
        statuses, output = self._statuses(instance, [patch])
        return {"status": "ran", "returncode": 0, "output": output, "timed_out": False, "test_statuses": statuses,
                "tampered": False}

    def evaluate(self, instance: dict, patch: str, log_dir: pathlib.Path) -> dict:
        self.calls.append("evaluate")
        if self.fail == "evaluate":
            return {"status": "setup_failed", "error": "install failed (injected)"}
        statuses, _ = self._statuses(instance, [instance["test_patch"], patch])
        wanted = test_list(instance, "FAIL_TO_PASS") + test_list(instance, "PASS_TO_PASS")
        resolved = all(statuses.get(t) == "PASSED" for t in wanted)
        if self.gold_unresolved and patch:
            resolved = False
        return {"status": "resolved" if resolved else "unresolved", "resolved": resolved}
