"""Reverted PRs (SWE-smith's "PR mirror"), from the curation pipeline's PR records (`data/records.py`).

The merged state is the record's base commit with its `oracle_patch` (the PR's non-test changes) and `test_patch`
(its test changes). Undoing the non-test changes leaves the base's code under the PR's tests: FAIL_TO_PASS are the
PR's tests that pass merged and fail reverted, PASS_TO_PASS those that pass in both. The task is then the base
commit (its history holds nothing of the PR), the PR's code as the gold patch and its tests as the hidden test
patch; it is kept only when the harness resolves it with the gold patch and not with the empty one.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import unidiff

from swerl_jax.tasks import statements, validate


def test_files(test_patch: str) -> list[str]:
    """The Python test files a PR's test patch leaves in place (added or modified, not deleted): its data files
    (flask-4992's tests/static/config.toml) are not test arguments (given one, pytest collected nothing)."""
    return sorted(f.path for f in unidiff.PatchSet(test_patch) if not f.is_removed_file and f.path.endswith(".py"))


def pr_instance(record: dict, spec: dict) -> dict:
    """The SWE-bench-shaped task of a PR record (FAIL_TO_PASS/PASS_TO_PASS still empty); a record without a
    test patch is an error naming it."""
    if not record.get("test_patch", "").strip():
        raise ValueError(f"record {record.get('instance_id')!r}: field 'test_patch' is empty: a reverted PR needs "
                         "the PR's tests")
    digest = hashlib.sha256(record["oracle_patch"].encode()).hexdigest()[:8]
    return {"instance_id": f"{record['instance_id']}.revert.{digest}", "repo": record["repo"],
            "base_commit": record["base_commit"], "patch": record["oracle_patch"],
            "test_patch": record["test_patch"], "problem_statement": "", "hints_text": "",
            "created_at": record["created_at"], "version": "inferred", "environment_setup_commit":
            record["base_commit"], "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]", "source": "reverted_pr",
            "mutation": {"kind": "reverted_pr", "file": "", "function": "", "line": 0,
                         "key": record["instance_id"]}, "spec": spec}


def validate_pr(record: dict, spec: dict, executor, log_dir: pathlib.Path,
                rewrite: statements.Rewriter | None = None) -> dict:
    """Decide one PR record: {kept, reason, instance_id, f2p, p2p, (instance)}; validate.InfraError when a run
    failed outside the tests (never a result)."""
    instance = pr_instance(record, spec)
    tests = test_files(record["test_patch"])
    row = {"instance_id": instance["instance_id"], "repo": record["repo"], "source": "reverted_pr",
           "mutation": instance["mutation"]}
    merged = validate.script_statuses(executor, instance, record["oracle_patch"] + record["test_patch"], tests,
                                      log_dir / "merged")
    reverted = validate.script_statuses(executor, instance, record["test_patch"], tests, log_dir / "reverted")
    if not validate.fail_to_pass(merged["statuses"], {})[0]:  # nothing passes merged: the env, not the PR
        raise validate.InfraError(f"{instance['instance_id']}: no test of {tests} passes with the PR merged")
    if merged["timed_out"] or reverted["timed_out"]:
        return {**row, "kept": False, "reason": "the PR's tests time out"}
    f2p, p2p = validate.fail_to_pass(merged["statuses"], reverted["statuses"])
    if not f2p:
        return {**row, "kept": False, "reason": "no test of the PR fails with its code reverted"}
    instance.update(FAIL_TO_PASS=json.dumps(f2p), PASS_TO_PASS=json.dumps(p2p),
                    problem_statement=statements.statement(record["repo"], f2p, reverted["output"],
                                                           record["oracle_patch"], rewrite))
    checks = validate.check_instance(executor, instance, log_dir / "checks")
    decided = validate.verdict(checks)
    return {**row, **decided, "f2p": len(f2p), "p2p": len(p2p), "checks": checks,
            **({"instance": instance} if decided["kept"] else {})}
