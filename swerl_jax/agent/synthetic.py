"""Synthetic repositories whose bugs have unit tests: agent tasks that train end to end on a CPU.

Each task is one of `swerl_jax.data.synthetic`'s single-file bug fixes turned into a real git repository (the buggy
module, one commit with fixed dates, so the base commit's hash is the same on every machine) plus hidden unit tests
(stdlib `unittest`: the interpreter needs nothing installed). A task is a SWE-bench-shaped instance (instance_id,
repo, base_commit, problem_statement, patch = the gold change as git writes it, test_patch, FAIL_TO_PASS,
PASS_TO_PASS), so `SWEEnv` runs it like a real one; `SyntheticExecutor` is its executor: a shared clone of the
task's repository per episode, no install step, and grading that applies the hidden tests to a fresh checkout of
the final diff in the sandbox (resolved when both tests pass: the issue's FAIL_TO_PASS and an import check; the
verdict is swerl_jax/sandbox/verdict.py's record, never the test output).

    tasks = SyntheticTasks(root, n=8, seed=0)         # materialises the repositories under root (once)
    env = SWEEnv(tasks.instances[0], root, work, executor=tasks.executor(), reward="execution")
"""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import sys
import uuid

from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.sandbox.bwrap import Sandbox, SandboxLimits
from swerl_jax.sandbox.hostgit import host_git
from swerl_jax.sandbox.verdict import IDLE_S, driver_command, driver_inputs, read_records, verdict
from swerl_jax.sandbox.workdirs import remove_tree
from swerl_jax.tasks.executors import checkout, fresh_workdir

# The issue's test per bug kind (`m` is the module, {noun} its noun); each fails on the bug and passes on the fix.
_ISSUE_TESTS = {
    "off-by-one": "self.assertEqual(m.{noun}_window([1, 2, 3, 4], 0, 3), [1, 2, 3])\n"
                  "self.assertEqual(m.{noun}_window([1, 2, 3, 4], 1, 2), [2, 3])",
    "wrong-operator": "self.assertTrue(m.over_limit([m.LIMIT, 1]))\nself.assertFalse(m.over_limit([0]))",
    "missing-none-check": "key = next(iter(m.DEFAULTS))\nself.assertEqual(m.get_{noun}(None, key), m.DEFAULTS[key])\n"
                          "self.assertEqual(m.get_{noun}({{'a': 1}}, 'a'), 1)",
    "wrong-return": "self.assertEqual(m.find_{noun}([5, 6], 7), -1)\nself.assertEqual(m.find_{noun}([5, 6], 6), 1)",
    "inverted-condition": "self.assertEqual(m.active_{noun}s([{{'active': True}}, {{'active': False}}]), "
                          "[{{'active': True}}])",
    "wrong-default": "self.assertEqual(m.fetch_{noun}(lambda: 5), 5)",
    "string-format": "self.assertEqual(m.{noun}_line('a', 2), 'a: 2')",
}
_TEST_FILE = '''import importlib
import unittest

m = importlib.import_module("{module}")


class TestIssue(unittest.TestCase):
    def test_issue(self):
{body}

    def test_module_imports(self):
        self.assertTrue(callable(getattr(m, "{probe}", None)))


if __name__ == "__main__":
    unittest.main()
'''
# Fixed author and dates: a task's base commit hash depends only on its files.
_GIT_ENV = {"GIT_AUTHOR_NAME": "swerl", "GIT_AUTHOR_EMAIL": "swerl@example.invalid", "GIT_COMMITTER_NAME": "swerl",
            "GIT_COMMITTER_EMAIL": "swerl@example.invalid", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}


def _git(repo: pathlib.Path, *args: str, stdin: str | None = None) -> str:
    done = host_git(repo, *args, input=stdin, capture_output=True, text=True, env={**_GIT_ENV, "HOME": str(repo)})
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo} failed: {done.stderr.strip()[-300:]}")
    return done.stdout


def _indent(code: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in code.splitlines())


def hidden_test(record: dict) -> tuple[str, str]:
    """(path, text) of the record's hidden unit tests."""
    (path,) = record["code_context"]
    kind = record["source"].split(":", 1)[1]
    noun = pathlib.PurePosixPath(path).stem[:-1]  # widgets/users.py -> user
    module = path[:-3].replace("/", ".")
    probe = {"off-by-one": f"{noun}_window", "wrong-operator": "over_limit", "missing-none-check": f"get_{noun}",
             "wrong-return": f"find_{noun}", "inverted-condition": f"active_{noun}s", "wrong-default": f"fetch_{noun}",
             "string-format": f"{noun}_line"}[kind]
    body = _indent(_ISSUE_TESTS[kind].format(noun=noun), 8)
    return f"tests/test_{noun}s_issue.py", _TEST_FILE.format(module=module, body=body, probe=probe)


def _diff(repo: pathlib.Path) -> str:
    # as the agent's workspace writes diffs: Python hunk headers name the enclosing function
    attributes = repo / ".git" / "info" / "attributes"
    attributes.write_text("*.py diff=python\n")
    _git(repo, "add", "-A")
    return _git(repo, "diff", "--cached", "--no-color", "--no-ext-diff")


def materialise(record: dict, root: pathlib.Path) -> dict:
    """The record's repository under `root` (made once) and its SWE-bench-shaped instance."""
    (path, before), = record["code_context"].items()
    after = record["oracle_new_content"][path]
    iid = record["instance_id"]
    repo = root / iid
    test_path, test_text = hidden_test(record)
    if not (repo / ".git").is_dir():
        tmp = root / f".{iid}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        _git(tmp, "init", "-q", "-b", "main")
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path).write_text(before)
        _git(tmp, "add", "-A")
        _git(tmp, "commit", "-q", "-m", "base")
        tmp.rename(repo)  # atomic: a half-made repository is never seen under its name
    base = _git(repo, "rev-parse", "HEAD").strip()
    scratch = root / f".scratch.{iid}.{uuid.uuid4().hex[:8]}"
    try:
        _git(root, "clone", "-q", str(repo), str(scratch))
        (scratch / path).write_text(after)
        patch = _diff(scratch)
        _git(scratch, "reset", "-q", "--hard")
        (scratch / test_path).parent.mkdir(parents=True, exist_ok=True)
        (scratch / test_path).write_text(test_text)
        test_patch = _diff(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    module = test_path[:-3].replace("/", ".")
    return {"instance_id": iid, "repo": record["repo"], "base_commit": base,
            "problem_statement": record["problem_statement"], "patch": patch, "test_patch": test_patch,
            "test_file": test_path, "FAIL_TO_PASS": [f"{module}.TestIssue.test_issue"],
            "PASS_TO_PASS": [f"{module}.TestIssue.test_module_imports"], "version": "synthetic",
            "gold_edit": {"path": path, "before": before, "after": after}, "source": record["source"]}


class SyntheticExecutor:
    """Sets up and grades synthetic tasks: the executor interface `SWEEnv` uses (`prepare`, `evaluate`)."""

    name = "synthetic"

    def __init__(self, repos_root: pathlib.Path, out_dir: pathlib.Path,
                 limits: SandboxLimits = SandboxLimits(memory_bytes=2 << 30, cpu_seconds=60, timeout_s=60)) -> None:
        self.repos_root, self.out_dir, self.limits = pathlib.Path(repos_root), pathlib.Path(out_dir), limits
        # the interpreter's installation: the one host path besides the system folders its sandboxes see
        self.python = pathlib.Path(sys._base_executable).resolve()
        self.readable = [self.python.parent.parent]

    def env(self) -> dict[str, str]:
        """The sandbox environment: this machine's interpreter first on PATH, no bytecode files in the checkout."""
        return {"PATH": f"{self.python.parent}:/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}

    def prepare(self, instance: dict, patch: str, log_dir: pathlib.Path, work: pathlib.Path) -> dict:
        """A checkout of the task at its base commit in `work`, `patch` applied: {sandbox, env, repo_dir} or
        {status, error}, like `LocalExecutor.prepare` (a history-free checkout of its own, for an episode, a
        grading and a script alike; the sandbox never sees the task repositories)."""
        source = self.repos_root / instance["instance_id"]
        if not (source / ".git").is_dir():
            return {"status": "no_repo", "error": f"no synthetic repository {source}"}
        repo_dir = work / "repo"
        failed = checkout(source / ".git", repo_dir, instance["base_commit"], self.out_dir / "history-free")
        if failed:
            (log_dir / "setup.log").write_text(failed)
            return {"status": "setup_failed", "error": failed}
        sandbox = Sandbox(readable=self.readable, limits=self.limits)
        if patch.strip():
            done = sandbox.run(f"cd {shlex.quote(str(repo_dir))} && git apply -v \"$INPUTS/model.patch\"", work,
                               env=self.env(), inputs={"model.patch": patch if patch.endswith("\n") else patch + "\n"})
            (log_dir / "patch.log").write_text(done.output)
            if done.returncode != 0:
                return {"status": "patch_failed", "error": "git apply did not apply the patch"}
        return {"sandbox": sandbox, "env": self.env(), "repo_dir": repo_dir}

    def run_script(self, instance: dict, patch: str, script: str, log_dir: pathlib.Path,
                   files: dict[str, str] | None = None) -> dict:
        """`LocalExecutor.run_script` for a synthetic task: `patch` applied to a fresh checkout, `files` at $INPUTS,
        the bash `script` run from the checkout in the sandbox ($REPO, $WORK set); never the hidden tests."""
        work = fresh_workdir(self.out_dir, instance["instance_id"])
        log_dir.mkdir(parents=True, exist_ok=True)
        try:
            ready = self.prepare(instance, patch, log_dir, work)
            if "status" in ready:
                return ready
            env = {**ready["env"], "REPO": str(ready["repo_dir"]), "WORK": str(work)}
            done = ready["sandbox"].run(f"cd {shlex.quote(str(ready['repo_dir']))}\n{script}", work, env=env,
                                        inputs=files)
            (log_dir / "script.log").write_text(f"{script}\n---\n{done.output}")
            return {"status": "ran", "returncode": done.returncode, "output": done.output,
                    "timed_out": done.timed_out}
        finally:
            remove_tree(work)

    def evaluate(self, instance: dict, patch: str, log_dir: pathlib.Path) -> dict:
        """Apply `patch` and the hidden tests to a fresh checkout and run them in the sandbox (no network)."""
        work = fresh_workdir(self.out_dir, instance["instance_id"])
        log_dir.mkdir(parents=True, exist_ok=True)
        try:
            ready = self.prepare(instance, patch, log_dir, work)
            if "status" in ready:
                return ready
            # The verdict is the driver's record (swerl_jax/sandbox/verdict.py), never the test output: an
            # isolated interpreter (a repository `unittest.py` cannot shadow the stdlib), each expected test id's
            # result reported after the run, under a nonce the code under test cannot read.
            module = instance["test_file"][:-3].replace("/", ".")
            expected = [*instance["FAIL_TO_PASS"], *instance["PASS_TO_PASS"]]
            inputs = {"test.patch": instance["test_patch"],
                      **driver_inputs([{"module": module, "expected": expected, "root": str(ready["repo_dir"])}],
                                      timeout_s=self.limits.timeout_s * 0.9)}
            script = (f"cd {shlex.quote(str(ready['repo_dir']))} && git apply \"$INPUTS/test.patch\" && "
                      f"{driver_command(str(self.python))}")
            # a driver stopped by the code it runs goes quiet: killed within IDLE_S, the task reports nothing
            done = ready["sandbox"].run(script, work, env=ready["env"], inputs=inputs, idle_timeout_s=IDLE_S)
            (log_dir / "test.log").write_text(f"{script}\n---\n{done.output}")
            v = verdict(read_records(done.output).get(0), expected)
            if done.timed_out or v.status == "timeout":
                return {"status": "timeout", "error": f"tests ran past {self.limits.timeout_s:.0f}s"}
            return {"status": "resolved" if v.resolved else "unresolved", "tests_ran": v.status != "missing",
                    "returncode": done.returncode, "passed": list(v.passed), "failed": list(v.failed),
                    "log": str(log_dir / "test.log")}
        finally:
            remove_tree(work)


class SyntheticTasks:
    """`n` synthetic agent tasks (deterministic in `seed`), their repositories materialised under `root`."""

    def __init__(self, root: str | os.PathLike, n: int, seed: int = 0, repos: tuple[str, ...] = ("acme/widgets",)
                 ) -> None:
        self.root = pathlib.Path(root)
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        self.instances = [materialise(r, self.root / "repos") for r in synthetic_records(n, seed, repos)]

    def executor(self, out_dir: str | os.PathLike | None = None) -> SyntheticExecutor:
        """An executor over these tasks' repositories (grading work dirs under `out_dir`, default root/grade)."""
        return SyntheticExecutor(self.root / "repos", pathlib.Path(out_dir or self.root / "grade"))
