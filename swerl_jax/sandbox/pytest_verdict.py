"""pytest verdicts the code under test cannot print, and plugins it cannot load: the record of a trusted plugin.

    plugin = PluginRun.new(roots=[site_packages_of_the_env])        # a random module name and a per-run token
    done = sandbox.run(script, work, env={**env, **plugin.env(env)}, inputs={**inputs, **plugin.inputs()})
    v = plugin.verdict(done.output, expected=[*f2p, *p2p])          # PluginVerdict(status, resolved, ...)

A grader that reads pytest's log believes whatever the code under test prints: a patch whose import writes `PASSED`
lines for the test ids it finds, then `os._exit(0)`, scored as a fix on a real flask instance; so did a hook
registered from the code under test (found through `gc.get_objects()`), and an entry point in a `*.dist-info` folder
of the checkout (pytest autoloads `pytest11` entry points from sys.path). Here the verdict is a record:

- The plugin (`pytest_verdict_plugin.py`, stdlib and pytest only) enters the sandbox read-only at /run/swerl under
  a random module name, outside the work dir, and is named first in `PYTEST_ADDOPTS` (`-p`), so pytest imports it
  before any repository code: tox passes that variable on (sphinx's tox.ini does). At import it sets
  `PYTEST_DISABLE_PLUGIN_AUTOLOAD`, before pytest reads it, so no entry point loads unless the grader names it: the
  `pytest11` entry points of the environment's own site-packages (the grader built it, before any model code) are
  named with `-p` after it; one in the checkout never is.
- It records each test id's outcome from the reports pytest makes, and only after the session finished
  (`pytest_unconfigure`) writes one line to the stdout it saved before capture began: the per-run token, the
  outcomes, pytest's exit status, and what changed in pytest's machinery since it loaded. A run that exits early
  (`os._exit`), is killed or never finishes writes no record: every expected test counts as not run. Printed
  results are log text and never read.
- Tampering is checked at the end: every hook implementation must belong to a conftest module, pytest's own or
  the environment's modules (files under its read-only site-packages) or instances of their classes, and be the
  plugin's own function; every method and descriptor of every class pytest and pluggy define, every function of
  their modules and the plugin manager's own callables must be the objects that were there at the start. Anything
  added or replaced makes the verdict `tampered` (reward 0, counted apart).
- The host, which runs no model code and cannot be signalled from the sandbox, reads the record after the sandbox
  ended: the line must carry the token, and there must be exactly one per pytest run.

Still possible (SECURITY.md): the tests run in the process of the code they test, which can read the token from
the plugin's globals and print a record of its own, or change outcomes in ways these checks do not see (objects
whose `__eq__` is always true, the tests' own functions). That needs code written against this plugin; the
detector (`reward/test_infra.py`) names source patches that reach for the test machinery.
"""

from __future__ import annotations

import configparser
import dataclasses
import hashlib
import json
import pathlib
import secrets
import shlex
from collections.abc import Callable, Mapping, Sequence

from swerl_jax.sandbox.bwrap import INPUTS_DIR

MARK = "@@swerl-verdict@@ "
_SOURCE = pathlib.Path(__file__).with_name("pytest_verdict_plugin.py").read_text(encoding="utf-8")
# Part of every grading's result key (`LocalExecutor.fingerprint`): a changed plugin grades anew, never reusing a
# result the old one made.
PLUGIN_DIGEST = hashlib.sha256(_SOURCE.encode()).hexdigest()[:16]
OK = ("PASSED", "XFAIL")  # what SWE-bench's grading counts as a pass


@dataclasses.dataclass(frozen=True)
class PluginVerdict:
    """The plugin's verdict on expected test ids: status resolved | unresolved (a record came, some expected test
    did not pass) | tampered (the machinery changed, or more records than runs) | missing (no record with the
    token: the run ended early, crashed or never started); the expected ids that passed and the others; what was
    tampered with; pytest's exit status."""

    status: str
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    tampered: tuple[str, ...] = ()
    exitstatus: int | None = None

    @property
    def resolved(self) -> bool:
        """Every expected test passed, in an untampered run."""
        return self.status == "resolved"

    def as_dict(self) -> dict:
        """For reports and rollout logs."""
        return {"status": self.status, "resolved": self.resolved, "passed": len(self.passed),
                "failed": list(self.failed)[:50], "tampered": list(self.tampered), "exitstatus": self.exitstatus}


def named_plugins(site_packages: Sequence[pathlib.Path]) -> list[str]:
    """The `pytest11` entry point names of the distributions installed in these (grader-built) site-packages
    folders, read on the host: what an autoloading pytest would load there, named explicitly."""
    names: set[str] = set()
    for folder in site_packages:
        for meta in sorted(pathlib.Path(folder).glob("*.dist-info")) + sorted(pathlib.Path(folder).glob("*.egg-info")):
            points = meta / "entry_points.txt"
            if not points.is_file():
                continue
            parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
            parser.optionxform = str  # entry point names are case-sensitive
            try:
                parser.read_string(points.read_text(encoding="utf-8", errors="replace"))
            except configparser.Error:
                continue
            if parser.has_section("pytest11"):
                names.update(k.strip() for k in parser["pytest11"])
    return sorted(n for n in names if n and all(c.isalnum() or c in "._-" for c in n))


@dataclasses.dataclass(frozen=True)
class PluginRun:
    """One grading's plugin: a random module name, a token, the grader's site-packages and the plugins it names."""

    module: str
    token: str
    roots: tuple[str, ...]
    plugins: tuple[str, ...]

    @classmethod
    def new(cls, roots: Sequence[pathlib.Path | str]) -> PluginRun:
        """A fresh name and token for one grading; `roots`: the environment's read-only site-packages."""
        roots = tuple(str(r) for r in roots)
        return cls(f"swerl_verdict_{secrets.token_hex(8)}", secrets.token_hex(16), roots,
                   tuple(named_plugins([pathlib.Path(r) for r in roots])))

    def inputs(self) -> dict[str, str]:
        """The sandbox input that holds the plugin (at /run/swerl, read-only)."""
        source = _SOURCE.replace('"@@TOKEN@@"', json.dumps(self.token), 1)
        source = source.replace("ROOTS = []", f"ROOTS = {json.dumps(list(self.roots))}", 1)
        return {f"{self.module}.py": source}

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The variables that load the plugin first (PYTEST_ADDOPTS, PYTHONPATH) and turn autoload off."""
        named = " ".join(f"-p {shlex.quote(p)}" for p in self.plugins)
        addopts = " ".join(x for x in (f"-p {self.module}", named, base.get("PYTEST_ADDOPTS", "")) if x)
        path = ":".join(x for x in (INPUTS_DIR, base.get("PYTHONPATH", "")) if x)
        return {"PYTEST_ADDOPTS": addopts, "PYTHONPATH": path, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def records(self, output: str) -> list[dict]:
        """The record lines in `output` that carry this run's token."""
        found = []
        for line in output.split("\n"):
            if not line.startswith(MARK):
                continue
            try:
                record = json.loads(line[len(MARK):])
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("nonce") == self.token:
                found.append(record)
        return found

    def statuses(self, output: str, runs: int = 1,
                 test_ids: Callable[[dict[str, str]], dict[str, str]] | None = None
                 ) -> tuple[dict[str, str] | None, list[str], int | None]:
        """({test id: status} from the records of `runs` pytest runs, or None when there is no record; what was
        tampered with; pytest's last exit status). `test_ids` maps the record's {node id: status} to the ids the
        caller's tests are written in (SWE-bench's ids are what its log parser makes of a node id: cut at the
        first space)."""
        records = self.records(output)
        if not records:
            return None, [], None
        outcomes: dict[str, str] = {}
        tampered: list[str] = []
        for record in records:
            if isinstance(record.get("outcomes"), dict):
                outcomes.update({str(k): str(v) for k, v in record["outcomes"].items()})
            tampered += [str(t) for t in record.get("tampered") or []]
        if len(records) > runs:
            tampered.append(f"{len(records)} records for {runs} pytest run(s)")
        if test_ids is not None:
            outcomes = test_ids(outcomes)
        exitstatus = records[-1].get("exitstatus")
        return outcomes, tampered[:50], exitstatus if isinstance(exitstatus, int) else None

    def verdict(self, output: str, expected: Sequence[str], runs: int = 1,
                test_ids: Callable[[dict[str, str]], dict[str, str]] | None = None) -> PluginVerdict:
        """The verdict on `expected` test ids from the sandbox's output of `runs` pytest runs (see `statuses`)."""
        expected = tuple(expected)
        outcomes, tampered, exitstatus = self.statuses(output, runs, test_ids)
        if outcomes is None:
            return PluginVerdict("missing", (), expected)
        passed = tuple(t for t in expected if outcomes.get(t) in OK)
        failed = tuple(t for t in expected if outcomes.get(t) not in OK)
        if tampered:
            return PluginVerdict("tampered", passed, failed, tuple(tampered), exitstatus)
        status = "resolved" if expected and not failed else "unresolved"
        return PluginVerdict(status, passed, failed, (), exitstatus)
