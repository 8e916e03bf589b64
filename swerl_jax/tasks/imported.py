"""One import run: read a downloaded task-set file, convert every record (`tasks.importers`), mark each instance
runnable here or out of reach, write the instances as JSON lines, count what was skipped and why.

    report = import_file("swe-gym", IN, OUT, repos=None)
    print(report.line())
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Iterator

from swerl_jax.data.swebench import find_clone
from swerl_jax.tasks import importers, reach, specs


@dataclasses.dataclass
class ImportReport:
    """What one file gave: instances written, how many can run here, out of reach by reason, bad records."""

    source: str
    path: str
    records: int = 0
    written: int = 0
    runnable: int = 0
    out_of_reach: dict[str, int] = dataclasses.field(default_factory=dict)
    bad: list[str] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        """One line: the counts and each distinct out-of-reach reason."""
        far = "".join(f"; out of reach {n}: {why}" for why, n in sorted(self.out_of_reach.items()))
        return (f"import {self.source} {self.path}: {self.written} instances of {self.records} records, "
                f"{self.runnable} can run here, {self.written - self.runnable} out of reach, {len(self.bad)} bad "
                f"records{far}")


def read_rows(path: pathlib.Path) -> Iterator[tuple[str, dict | Exception]]:
    """(where, row or the error reading it) for every record of a .parquet, .json (a list) or JSON-lines file; a
    bad line is one error, the lines after it are still read."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for k, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path}: row {k}", row
        return
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" or text.lstrip().startswith("["):
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
        for k, row in enumerate(data):
            yield f"{path}: record {k}", row if isinstance(row, dict) else TypeError(f"not an object: {row!r:.40}")
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            yield f"{path}:{number}", ValueError(f"not JSON ({e.msg})")
            continue
        yield f"{path}:{number}", row if isinstance(row, dict) else TypeError(f"not an object ({type(row).__name__})")


def out_of_reach(instance: dict, repos: pathlib.Path | None) -> reach.OutOfReach | None:
    """Why the harness cannot grade `instance` here, or None: its clone (when --repos is given), a base that is
    a commit, and a spec (SWE-bench's for its repo and version, or a complete one of its own)."""
    repo, base = instance["repo"], instance["base_commit"]
    if instance["source"] == "swe-smith":
        return reach.OutOfReach(f"its base is the branch {base} of the mirror github.com/{repo} (the bug applied, "
                                "its FAIL_TO_PASS test files removed at the head), not a commit of the repository",
                                f"clone the mirror into --repos and resolve {base} to its commit, restoring the "
                                "test files from the branch's parent as test_patch")
    if repos is not None:
        if find_clone(repos, repo) is None:
            return reach.missing_repo(repo, str(repos))
    if not importers.COMMIT.fullmatch(base):
        return reach.OutOfReach(f"its base {base!r} is not a commit id", "resolve it in a clone (git rev-parse) "
                                "and write the commit to base_commit")
    own = instance.get("spec")
    if isinstance(own, dict) and all(own.get(k) for k in importers.SPEC_KEYS):
        return None
    try:
        specs.env_spec(repo, instance["version"])
        return None
    except specs.SpecError as e:
        lacks = f" (its own spec lacks {[k for k in importers.SPEC_KEYS if not own.get(k)]})" if own else ""
        return reach.OutOfReach(f"no install/test spec: {e}{lacks}", "infer one from its packaging files at the "
                                "base commit (tasks.infer_spec) and record it as the instance's spec")


def import_file(source: str, path: str | os.PathLike, out: str | os.PathLike,
                repos: str | os.PathLike | None = None) -> ImportReport:
    """Convert every record of `path` (format `source`: importers.FORMATS) into `out` (JSON lines, written to a
    temporary name first); each bad record is one line in the report, never an exception mid-file."""
    if source not in importers.FORMATS:
        raise ValueError(f"--format {source!r}: choose one of {sorted(importers.FORMATS)}")
    path, out = pathlib.Path(path), pathlib.Path(out)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    repos_dir = pathlib.Path(repos) if repos else None
    if repos_dir is not None and not repos_dir.is_dir():
        raise FileNotFoundError(f"--repos {repos_dir}: no such folder")
    convert, report, seen = importers.FORMATS[source], ImportReport(source, str(path)), set()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w") as f:
        for where, row in read_rows(path):
            report.records += 1
            if isinstance(row, Exception):
                report.bad.append(f"{where}: {row}")
                continue
            name = f"{where} ({row.get('instance_id') or row.get('repo_name') or 'no instance_id'})"
            try:
                instance = convert(row)
            except importers.BadRecord as e:
                report.bad.append(f"{name}: {e}")
                continue
            if instance["instance_id"] in seen:
                report.bad.append(f"{name}: field 'instance_id': {instance['instance_id']!r} repeats an earlier one")
                continue
            seen.add(instance["instance_id"])
            far = out_of_reach(instance, repos_dir)
            instance["out_of_reach"] = None if far is None else {"reason": far.reason, "fix": far.fix}
            if far is None:
                report.runnable += 1
            else:
                report.out_of_reach[far.reason] = report.out_of_reach.get(far.reason, 0) + 1
            f.write(json.dumps(instance) + "\n")
            report.written += 1
    os.replace(tmp, out)
    return report
