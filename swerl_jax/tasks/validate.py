"""Validate candidate bugs in the sandbox, in the repository's environment, and keep those that make a task.

For a candidate on file F (tests T: the test files that exercise F), with the project's `LocalExecutor` (plugin
verdict: statuses from the trusted pytest plugin, not from what the code prints):
1. base: T's statuses at the commit (one run per (commit, T), shared by every candidate on F);
2. bug: T's statuses with the bug patch; FAIL_TO_PASS = passed at base, not with the bug; PASS_TO_PASS = passed in
   both. No FAIL_TO_PASS: dropped;
3. the task commit (the bug applied, T removed: they are the hidden tests its test_patch adds back), then through
   the harness's own `evaluate`: the gold (inverse) patch must resolve it and the empty patch must not.
A decided candidate (kept or dropped, with why) is appended to results.jsonl under its key (repository, commit,
mutation, the executor's fingerprint: spec, limits, index cut-off, verdict plugin digest); a re-run skips keys
already there. Infrastructure failures (env build, install, a run that wrote no record) go to errors.jsonl and
are never results: the next run tries them again.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import pathlib
import shlex
import threading
import time
from collections.abc import Callable

from tqdm import tqdm

from swerl_jax.tasks import sources, statements
from swerl_jax.tasks.mutations import Mutation, unified_diff

# statuses of a run that say nothing about the patch: the machine, the environment or the runner failed
INFRA = ("env_failed", "setup_failed", "no_repo", "out_of_reach", "error", "tampered")


class InfraError(RuntimeError):
    """A run that failed for a reason outside the candidate (never stored as a result)."""


@dataclasses.dataclass
class Target:
    """What the candidates of one repository share: where its task commits go, its spec and date, its tests."""

    repo: str
    git_dir: pathlib.Path  # the generators' clone (sources.task_repo): task commits are added to it
    commit: str
    created_at: str
    spec: dict
    snapshot: sources.Snapshot


def added_file_patch(files: dict[str, str]) -> str:
    """A patch that adds `files` ({path: text}) as new files (a task's hidden tests)."""
    out = []
    for path in sorted(files):
        body = unified_diff(path, "", files[path]).split("\n", 1)[1].replace(f"--- a/{path}", "--- /dev/null", 1)
        out.append(f"diff --git a/{path} b/{path}\nnew file mode 100644\n{body}")
    return "".join(out)


def _passed(statuses: dict[str, str]) -> set[str]:
    return {t for t, s in statuses.items() if s in ("PASSED", "XFAIL")}


def script_statuses(executor, instance: dict, patch: str, tests: list[str], log_dir: pathlib.Path) -> dict:
    """The statuses of `tests` (files) after `patch` on the instance's commit, by the trusted plugin:
    {"statuses", "output", "timed_out"}; InfraError when the run failed outside the tests."""
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = instance["spec"]
    command = f"{spec['test_cmd']} {' '.join(map(shlex.quote, tests))}"
    ran = executor.run_script(instance, patch, command, log_dir)
    if ran.get("status") != "ran":
        raise InfraError(f"{log_dir.name}: {ran.get('status')}: {ran.get('error', '')}"[:500])
    if ran.get("tampered"):
        raise InfraError(f"{log_dir.name}: the plugin's record was tampered with")
    return {"statuses": ran.get("test_statuses") or {}, "output": ran.get("output", ""),
            "timed_out": bool(ran.get("timed_out"))}


def check_instance(executor, instance: dict, log_dir: pathlib.Path) -> dict:
    """The harness's own grading of a task with its gold and with the empty patch: {"gold": status, "empty":
    status, "gold_s", "empty_s": each grading's seconds}; InfraError when either run failed outside the tests."""
    checks: dict = {}
    for name, patch in (("gold", instance["patch"]), ("empty", "")):
        (log_dir / name).mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        result = executor.evaluate(instance, patch, log_dir / name)
        checks[f"{name}_s"] = _since(started)
        if result.get("status") in INFRA or (result.get("status") == "patch_failed" and name == "gold"):
            raise InfraError(f"{instance['instance_id']} {name}: {result.get('status')}: "
                             f"{result.get('error', '')}"[:500])
        checks[name] = result.get("status")
    return checks


def verdict(checks: dict[str, str]) -> dict:
    """Keep a task only when the gold patch resolves it and the empty patch does not: {kept, reason}."""
    if checks["gold"] != "resolved":
        return {"kept": False, "reason": f"the gold patch does not resolve it ({checks['gold']})"}
    if checks["empty"] == "resolved":
        return {"kept": False, "reason": "the empty patch resolves it"}
    return {"kept": True, "reason": "kept"}


def fail_to_pass(base: dict[str, str], broken: dict[str, str]) -> tuple[list[str], list[str]]:
    """(FAIL_TO_PASS, PASS_TO_PASS): tests passing in `base` and not in `broken`, and passing in both."""
    passed_base, passed_broken = _passed(base), _passed(broken)
    return sorted(passed_base - passed_broken), sorted(passed_base & passed_broken)


class Validator:
    """Runs candidates of one `Target` through an executor (`LocalExecutor(verdict="plugin")`), resumably."""

    def __init__(self, target: Target, executor, out_dir: pathlib.Path,
                 rewrite: statements.Rewriter | None = None):
        self.target, self.executor, self.out_dir, self.rewrite = target, executor, out_dir, rewrite
        self.results_path = out_dir / "results.jsonl"
        self.errors_path = out_dir / "errors.jsonl"
        self.logs = out_dir / "logs"
        self._lock = threading.Lock()
        self._base: dict[tuple[str, ...], dict[str, str] | None] = {}
        self._base_locks: dict[tuple[str, ...], threading.Lock] = {}
        self.done = self._load()

    def _load(self) -> dict[str, dict]:
        done = {}
        if self.results_path.exists():
            for number, line in enumerate(self.results_path.read_text().splitlines(), 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as err:  # a line a killed run cut short: say so, re-run it
                        print(f"{self.results_path}:{number}: skipped, not JSON ({err})")
                        continue
                    done[row["key"]] = row
        return done

    def base_instance(self) -> dict:
        """The instance that runs scripts at the unmodified commit (its tests in place)."""
        t = self.target
        return {"instance_id": f"{t.repo.replace('/', '__')}-base-{t.commit[:10]}", "repo": t.repo,
                "base_commit": t.commit, "version": "inferred", "spec": t.spec, "created_at": t.created_at,
                "test_patch": "", "patch": "", "FAIL_TO_PASS": [], "PASS_TO_PASS": []}

    def key(self, mutation: Mutation) -> str:
        """The result key: repository, commit, mutation and everything the executor says decides a run."""
        material = {"repo": self.target.repo, "commit": self.target.commit, "mutation": mutation.key,
                    "tests": self.target.snapshot.tests_for(mutation.file),
                    "fingerprint": self.executor.fingerprint(self.base_instance())}
        return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def _script(self, tests: list[str], patch: str, name: str) -> dict:
        return script_statuses(self.executor, self.base_instance(), patch, tests, self.logs / name)

    def base_statuses(self, tests: list[str]) -> dict[str, str]:
        """T's statuses at the commit, run once per test set (later candidates on the same files wait for it)."""
        key = tuple(tests)
        with self._lock:
            lock = self._base_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._base:
                run = self._script(tests, "", f"base-{hashlib.sha256(' '.join(tests).encode()).hexdigest()[:8]}")
                # a base that passes nothing is this run's problem, not each candidate's: remembered (in memory
                # only) so the other candidates on these files fail fast
                self._base[key] = run["statuses"] if _passed(run["statuses"]) and not run["timed_out"] else None
            if self._base[key] is None:
                raise InfraError(f"the base run of {tests} passed no test")
            return self._base[key]

    def validate(self, mutation: Mutation) -> dict:
        """Decide one candidate: {key, kept, reason, mutation, ..., instance (when kept)}; InfraError otherwise."""
        t, started = self.target, time.monotonic()
        tests = t.snapshot.tests_for(mutation.file)
        row = {"key": self.key(mutation), "repo": t.repo, "commit": t.commit, "mutation": mutation.describe(),
               "tests": tests}
        if not tests:
            return {**row, "kept": False, "reason": "no test file exercises the module"}
        if not mutation.valid():
            return {**row, "kept": False, "reason": "the mutated file does not parse or is unchanged"}
        base = self.base_statuses(tests)
        bug = self._script(tests, mutation.bug_patch(), f"{mutation.key}-bug")
        if bug["timed_out"]:
            return {**row, "kept": False, "reason": "the tests time out with the bug", "seconds": _since(started)}
        f2p, p2p = fail_to_pass(base, bug["statuses"])
        if not f2p:
            return {**row, "kept": False, "reason": "no test that passes at the commit fails with the bug",
                    "seconds": _since(started)}
        instance = self.make_instance(mutation, tests, f2p, p2p, bug["output"])
        checks = check_instance(self.executor, instance, self.logs / instance["instance_id"])
        row.update(f2p=len(f2p), p2p=len(p2p), checks=checks, seconds=_since(started))
        return {**row, **verdict(checks), **({"instance": instance} if verdict(checks)["kept"] else {})}

    def make_instance(self, mutation: Mutation, tests: list[str], f2p: list[str], p2p: list[str],
                      bug_output: str) -> dict:
        """The SWE-bench-shaped task: base_commit is a commit with the bug and without the hidden tests."""
        t = self.target
        iid = f"{t.repo.replace('/', '__')}.{t.commit[:8]}.{mutation.kind}.{mutation.key}"
        sha = sources.task_commit(t.git_dir, t.commit, {mutation.file: mutation.mutated()}, tests,
                                  f"task {iid}", f"refs/swerl-tasks/{iid}")
        gold = mutation.gold_patch()
        return {"instance_id": iid, "repo": t.repo, "base_commit": sha, "patch": gold,
                "test_patch": added_file_patch({p: t.snapshot.files[p] for p in tests}),
                "problem_statement": statements.statement(t.repo, f2p, bug_output, gold, self.rewrite),
                "hints_text": "", "created_at": t.created_at, "version": "inferred",
                "environment_setup_commit": t.commit, "FAIL_TO_PASS": json.dumps(f2p),
                "PASS_TO_PASS": json.dumps(p2p), "source": "mutation", "mutation": mutation.describe(),
                "spec": t.spec, "original_commit": t.commit}

    def run(self, candidates: list[Mutation], workers: int = 1, want: int | None = None,
            progress: bool = True, on_result: Callable[[dict], None] | None = None) -> dict:
        """Validate `candidates` not yet decided, `workers` at a time, until `want` are kept (counting kept
        ones already stored); results appended as they come. Returns counts (kept, dropped, infra, skipped)."""
        kept = sum(1 for r in self.done.values() if r["kept"])
        todo = [m for m in candidates if self.key(m) not in self.done]
        counts = {"kept": kept, "dropped": 0, "infra": 0, "skipped": len(candidates) - len(todo)}
        self.out_dir.mkdir(parents=True, exist_ok=True)
        bar = tqdm(total=len(todo), disable=not progress, desc=f"validate {self.target.repo}")
        pending = iter(todo)
        with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
            running = set()
            while True:
                while len(running) < max(1, workers) and (want is None or counts["kept"] < want):
                    mutation = next(pending, None)
                    if mutation is None:
                        break
                    running.add(pool.submit(self._one, mutation))
                if not running:
                    break
                finished, running = concurrent.futures.wait(running, return_when="FIRST_COMPLETED")
                for future in finished:
                    row = future.result()
                    counts["infra" if row is None else "kept" if row["kept"] else "dropped"] += 1
                    bar.update(1)
                    bar.set_postfix(kept=counts["kept"])
                    if row is not None and on_result is not None:
                        on_result(row)
        bar.close()
        return counts

    def _one(self, mutation: Mutation) -> dict | None:
        try:
            row = self.validate(mutation)
        except InfraError as err:
            with self._lock, open(self.errors_path, "a") as out:
                out.write(json.dumps({"mutation": mutation.describe(), "error": str(err)}) + "\n")
            return None
        with self._lock, open(self.results_path, "a") as out:
            out.write(json.dumps(row) + "\n")
            self.done[row["key"]] = row
        return row


def _since(started: float) -> float:
    return round(time.monotonic() - started, 1)
