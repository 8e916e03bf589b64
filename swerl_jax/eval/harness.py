"""The SWE-bench harness CLI: grade predictions in the sandbox, write report.json, print `resolved N/M`.

    python -m swerl_jax.eval.harness --instances FILE --predictions FILE --repos DIR --out DIR [--workers N]
        [--instance_ids ID ...]

Predictions are JSONL or a JSON list (SWE-bench's two forms). Per run, everything goes under --out:
results/<id>.json (one per graded instance, keyed by everything that determines it: what makes the run resumable; a
failure of the infrastructure, such as a missing clone or environment, is graded again on re-run), logs/<id>/
(env_build / setup / patch / test logs), work/<id>.<random>/ (removed after grading unless --keep-workdirs), repos/
(bare clones unpacked from .bundle files) and report.json. The cached environments live in
$SWERL_JAX_HOME/eval/envs (or --env-cache), shared between runs, at most --env-cache-gb of them. Stdout ends with a
line of counts per status and `resolved N/M (...)`, M every instance asked about (the instances file, or
--instance_ids): one with no prediction, an empty patch or an error is unresolved, and the counts per reason
follow. The exit code is 1 when a prediction was malformed or named an unknown instance, or nothing could be
graded. Ctrl-C writes the report of what finished. Patches that change how tests run (conftest.py, pytest settings,
sitecustomize, .pth) are graded as the official harness grades them and listed in test_infra_ids.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import pathlib
import shutil
import sys
import threading
import traceback

from tqdm import tqdm

from swerl_jax.config import did_you_mean
from swerl_jax.data.paths import user_path
from swerl_jax.eval import outcomes
from swerl_jax.eval.predictions import PREDICTION_FIELDS, index_instances, load_predictions, safe_id
from swerl_jax.reward.test_infra import test_infra_paths
from swerl_jax.sandbox.bwrap import SandboxLimits, bwrap_path
from swerl_jax.tasks import environments, reach
from swerl_jax.tasks.executors import DockerExecutor, Executor, LocalExecutor
from swerl_jax.tasks.index_cutoff import MODES as CUTOFF_MODES
from swerl_jax.tasks.verdicts import VERDICTS

# Bump when grading, patching or the sandbox changes what a result means: every stored result is then re-graded.
HARNESS_VERSION = 6  # 4: history-free checkouts, the seccomp filter, a finished pytest session is no crash;
# 5: the trusted plugin in every pytest run (autoload off, its verdict beside the log's); 6: ANSI colour codes are
# taken out of the test output before the log parser reads it (a repository's --color=yes read as no test passed)
# Statuses that say the infrastructure failed, not the patch: never reused, so a fixed cause is graded anew.
INFRA_FAILURES = ("no_repo", "env_failed", "setup_failed", reach.STATUS)  # out of reach: until it is fetched
# The instance fields a result depends on (with the patch and the executor's fingerprint).
GRADED_FIELDS = ("instance_id", "repo", "base_commit", "version", "environment_setup_commit", "test_patch",
                 "FAIL_TO_PASS", "PASS_TO_PASS")
def _patch_digest(patch: str) -> str:
    return hashlib.sha256(patch.encode()).hexdigest()


def result_key(instance: dict, patch: str, executor: Executor) -> str:
    """What a stored result must match to be reused: the patch, the instance's graded fields, the executor's
    fingerprint (environment spec, limits) and the harness version."""
    fingerprint = getattr(executor, "fingerprint", None)
    material = {"harness": HARNESS_VERSION, "patch": _patch_digest(patch),
                "instance": {k: instance.get(k) for k in GRADED_FIELDS},
                "executor": fingerprint(instance) if fingerprint else type(executor).__name__}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


class Harness:
    """Grades predictions with an executor, N at a time, resumable through OUT/results/<id>.json."""

    def __init__(self, instances: dict[str, dict], executor: Executor, out_dir: pathlib.Path, workers: int = 1,
                 named: dict | None = None):
        self.instances, self.executor, self.out_dir, self.workers = instances, executor, out_dir, workers
        self.named = named or {}  # what the report names as evaluated (files, model labels)
        self.results_dir = out_dir / "results"
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def _finished(self, iid: str, patch: str) -> dict | None:
        """The stored result of this exact grading, or None: a changed prediction, instance, environment spec,
        limit or harness version is graded again, and so is an infrastructure failure or a harness crash."""
        path = self.results_dir / f"{iid}.json"
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):  # absent, or cut mid-write by a killed run: grade it again
            return None
        if (result.get("result_key") == result_key(self.instances[iid], patch, self.executor)
                and not result.get("harness_crash") and result.get("status") not in INFRA_FAILURES):
            return result
        return None

    def _grade_one(self, prediction: dict) -> dict:
        iid, patch = prediction["instance_id"], prediction["model_patch"]
        log_dir = self.out_dir / "logs" / iid
        shutil.rmtree(log_dir, ignore_errors=True)  # a re-graded instance's logs are all from this attempt
        log_dir.mkdir(parents=True)
        base = {"instance_id": iid, "model_name_or_path": prediction["model_name_or_path"],
                "patch_sha256": _patch_digest(patch), "empty_patch": not patch.strip(), "log_dir": str(log_dir),
                "result_key": result_key(self.instances[iid], patch, self.executor),
                "harness_version": HARNESS_VERSION,
                "test_infra_paths": test_infra_paths(patch, self.instances[iid].get("repo"))}
        try:
            result = self.executor.evaluate(self.instances[iid], patch, log_dir)
        except Exception as err:  # noqa: BLE001 - one instance's failure must not stop the run; logged
            (log_dir / "harness_error.log").write_text(traceback.format_exc())
            result = {"status": "error", "harness_crash": True,
                      "error": f"{type(err).__name__}: {err} (harness_error.log)"}
        result = {**base, "resolved": result.get("status") == "resolved", **result}
        tmp = self.results_dir / f".{iid}.json.tmp"
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, self.results_dir / f"{iid}.json")
        return result

    def run(self, predictions: dict[str, dict], errors: list[dict], progress: bool = True) -> dict:
        """Grade every prediction not already finished; write and return report.json's content.

        A prediction whose id is not in the instances file is an error of its own (listed, never graded, its id
        never used as a path); the rest are graded."""
        results, todo, errors = {}, [], list(errors)
        for iid in [i for i in predictions if i not in self.instances]:
            shown = repr(iid) if safe_id(iid) else f"{iid!r} (not a valid instance id)"
            errors.append({"status": "unknown_instance", "instance_id": iid,
                           "error": f"prediction for {shown}: not in the instances file"})
        for iid, prediction in predictions.items():
            if iid not in self.instances:
                continue
            done = self._finished(iid, prediction["model_patch"])
            if done is not None:  # (graded before the flag existed: it is the patch's, not the grading's)
                results[iid] = {**done, "test_infra_paths": test_infra_paths(prediction["model_patch"],
                                                                             self.instances[iid].get("repo"))}
            else:
                todo.append(prediction)
        bar = tqdm(total=len(todo), desc="instances", disable=not progress, file=sys.stderr)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.workers))
        try:
            futures = [pool.submit(self._grade_one, p) for p in todo]
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                with self._lock:
                    results[result["instance_id"]] = result
                    bar.update(1)
                    bar.set_postfix(resolved=sum(r["resolved"] for r in results.values()))
        except KeyboardInterrupt:  # the report of what finished; finished results stay for the re-run
            pool.shutdown(wait=False, cancel_futures=True)
            bar.close()
            with self._lock:
                write_report(self.out_dir, dict(results), errors, list(self.instances), self.named,
                             pending=sorted(p["instance_id"] for p in todo if p["instance_id"] not in results))
            raise
        pool.shutdown()
        bar.close()
        return write_report(self.out_dir, results, errors, list(self.instances), self.named)


def write_report(out_dir: pathlib.Path, results: dict[str, dict], errors: list[dict], asked: list[str],
                 named: dict | None = None, pending: list[str] | None = None) -> dict:
    """report.json in the official harness's shape (id lists and counts) plus per-instance entries, the count of
    each status, and the predictions that were not graded (`prediction_errors`: malformed lines, duplicates, ids
    not in the instances file). `asked`: every instance asked about, the rate's denominator (`outcome_counts`
    gives each one's outcome); `named`: what was evaluated (files, model labels); `pending`: the ids an
    interrupted run did not finish."""
    ids, (counted, counted_ids) = sorted(results), outcomes.outcome_counts(asked, results, pending or ())

    def having(pred) -> list[str]:
        return [i for i in ids if pred(results[i])]

    graded, far = outcomes.GRADED, reach.STATUS
    counts: dict[str, int] = {}
    for status in [r["status"] for r in results.values()] + [e["status"] for e in errors]:
        counts[status] = counts.get(status, 0) + 1
    report = {**(named or {}), "total_instances": len(asked),
        "submitted_instances": len(results) + len(errors),
        "completed_instances": len(having(lambda r: r["status"] in graded)),
        "resolved_instances": len(having(lambda r: r["resolved"])),
        # unresolved, empty patch and error as `outcome_counts` has them: each instance in one of them (an empty
        # patch graded unresolved, or one out of reach, was counted twice: issue 57 item 6)
        "unresolved_instances": len(counted_ids["unresolved"]),
        "empty_patch_instances": len(counted_ids["empty_patch"]),
        "error_instances": len(counted_ids["error"]),
        "completed_ids": having(lambda r: r["status"] in graded),
        "resolved_ids": having(lambda r: r["resolved"]),
        "unresolved_ids": counted_ids["unresolved"],
        "empty_patch_ids": counted_ids["empty_patch"],
        "error_ids": counted_ids["error"],
        # what this machine cannot grade, each with its reason and fix: counted apart, not in the rate
        "out_of_reach_ids": having(lambda r: r["status"] == far),
        "out_of_reach": {i: {"reason": results[i].get("reason", ""), "fix": results[i].get("fix", "")}
                         for i in having(lambda r: r["status"] == far)},
        # patches that change how tests run (conftest.py, pytest/tox settings, sitecustomize, .pth): graded as the
        # official harness grades them, flagged here (swerl_jax/reward/test_infra.py)
        "test_infra_ids": having(lambda r: bool(r.get("test_infra_paths"))),
        "resolved_test_infra_ids": having(lambda r: r["resolved"] and bool(r.get("test_infra_paths"))),
        # the trusted plugin's verdict (sandbox/pytest_verdict.py), from the same run as the log's: runs whose test
        # machinery changed, and instances where the two verdicts differ (printed results, an early exit, a hook)
        "tampered_ids": having(lambda r: (r.get("plugin_verdict") or {}).get("status") == "tampered"),
        "verdict_disagreement_ids": having(_verdicts_differ),
        "unknown_ids": sorted(str(e["instance_id"]) for e in errors if e["status"] == "unknown_instance"),
        "malformed_predictions": sum(e["status"] != "unknown_instance" for e in errors),
        "status_counts": dict(sorted(counts.items())),
        # every instance asked about: no prediction, an empty patch and an error are unresolved (SWE-bench's rule)
        "outcome_counts": counted, "resolved_rate": outcomes.resolved_rate(counted),
        "no_prediction_ids": counted_ids["no_prediction"],
        "instances": {i: results[i] for i in ids},
        "prediction_errors": errors,
        "harness_version": HARNESS_VERSION,
        "schema_version": 3,
    }
    if pending is not None:
        report["interrupted"], report["pending_ids"] = True, pending
    tmp = out_dir / ".report.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, out_dir / "report.json")
    return report


def _verdicts_differ(result: dict) -> bool:
    """The log's and the trusted plugin's verdicts on one graded instance differ."""
    plugin = result.get("plugin_verdict")
    if not plugin or result.get("status") == reach.STATUS:
        return False
    return bool(plugin.get("resolved")) != bool(result.get("log_resolved", result.get("resolved")))


def summary(report: dict) -> str:
    """One line of counts, each instance graded or asked about in exactly one of them: graded (resolved, unresolved,
    empty patch, error by status; `outcome_counts`' partition of the graded instances), then what was not graded
    (out of reach, unknown ids, malformed lines)."""
    graded = [r for r in report["instances"].values() if outcomes.outcome(r) != outcomes.OUT_OF_REACH]
    by = {k: sum(outcomes.outcome(r) == k for r in graded) for k in ("resolved", "unresolved", "empty_patch", "error")}
    errors: dict[str, int] = {}
    for r in graded:
        if outcomes.outcome(r) == "error":
            errors[r["status"]] = errors.get(r["status"], 0) + 1
    parts = [f"resolved {by['resolved']}", f"unresolved {by['unresolved']}", f"empty patch {by['empty_patch']}",
             f"error {by['error']}" + (f" ({', '.join(f'{k} {v}' for k, v in sorted(errors.items()))})"
                                       if errors else "")]
    # out of reach: no patch was applied or tested (the report counts it apart), so it is not graded
    far = len(report["instances"]) - len(graded)
    not_graded = ([f"out of reach {far}"] if far else []) + [f"unknown id {len(report['unknown_ids'])}",
                                                            f"malformed line {report['malformed_predictions']}"]
    differ = len(report.get("verdict_disagreement_ids", []))
    verdicts = f"; the log's and the plugin's verdicts differ on {differ} (verdict_disagreement_ids)" if differ else ""
    return f"graded {len(graded)}: {', '.join(parts)}; not graded: {', '.join(not_graded)}{verdicts}"


def exit_code(report: dict) -> int:
    """0, or 1 when the input had malformed lines or unknown ids, or nothing could be graded (an empty
    predictions file, an --instance_ids with no prediction, every instance an infrastructure failure)."""
    if report["malformed_predictions"] or report["unknown_ids"]:
        return 1
    return 0 if report["completed_instances"] else 1


def typed_path(text: str) -> pathlib.Path:
    """A path flag, absolute against the current directory as it is parsed (report.json names the files)."""
    return pathlib.Path(user_path(text))


def positive_gb(text: str) -> float:
    """An argparse type: a size in GiB above 0 (0 would remove every env after each build)."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} GiB: must be above 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The CLI's arguments."""
    # the whole docstring, as laid out: its first line left out where everything goes (issue 46 held-out, item 7)
    p = argparse.ArgumentParser(prog="python -m swerl_jax.eval.harness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=typed_path, required=True, help="SWE-bench instances (JSON list or JSONL)")
    p.add_argument("--predictions", type=typed_path, required=True,
                   help="JSONL or a JSON list of " + ", ".join(PREDICTION_FIELDS))
    p.add_argument("--repos", type=typed_path, required=True, help="clones: owner__name[.git] or owner__name.bundle")
    p.add_argument("--out", type=typed_path, required=True, help="run dir (report.json, logs, results)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--executor", choices=("local", "docker"), default="local")
    p.add_argument("--env-cache", type=typed_path, default=None, help="default $SWERL_JAX_HOME/eval/envs")
    p.add_argument("--env-cache-gb", type=positive_gb, default=environments.CACHE_BYTES / (1 << 30),
                   help="what the env cache keeps (default %(default)g): a build past it removes the least recently "
                   "used envs no grading uses")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for an instance's tests (and patching)")
    p.add_argument("--setup-timeout", type=float, default=1800.0, help="seconds for an instance's install step")
    p.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap of sandboxed commands")
    p.add_argument("--index-cutoff", choices=CUTOFF_MODES, default="created_at",
                   help="unpinned requirements as of the instance's created_at (default), as of 2024-06-27 for every "
                   "instance (images: what the official images froze), or today's index (off)")
    p.add_argument("--verdict", choices=VERDICTS, default="log",
                   help="what decides each status: 'log' (default) grades pytest's log as the official harness "
                   "does; 'plugin' the trusted plugin's record, which printed results cannot forge. Both are "
                   "reported (plugin_verdict, verdict_disagreement_ids)")
    p.add_argument("--keep-workdirs", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--instance_ids", nargs="+", default=None, metavar="ID",
                   help="grade only these instances (as SWE-bench's harness)")
    return p


def make_executor(args: argparse.Namespace):
    """The executor the arguments ask for (bubblewrap checked up front: a clear error, not N failed instances)."""
    limits = SandboxLimits(memory_bytes=int(args.memory_gb * (1 << 30)), timeout_s=args.timeout,
                           cpu_seconds=int(args.timeout) + 60)
    if args.executor == "docker":
        return DockerExecutor(args.out, limits)
    bwrap_path()
    return LocalExecutor(args.repos, args.out, environments.EnvironmentCache(
                         args.env_cache, int(args.env_cache_gb * (1 << 30))), limits,
                         keep_workdirs=args.keep_workdirs, setup_timeout_s=args.setup_timeout,
                         index_cutoff=args.index_cutoff, verdict=args.verdict)


def select(instances: dict[str, dict], predictions: dict[str, dict], ids: list[str] | None
           ) -> tuple[dict[str, dict], dict[str, dict]]:
    """The instances and predictions `--instance_ids` keeps (all when None); ValueError naming an id that is not
    an instance, with a "did you mean"."""
    if ids is None:
        return instances, predictions
    for iid in ids:
        if iid not in instances:
            raise ValueError(f"--instance_ids: {iid!r} is not in the instances file"
                             + did_you_mean(iid, list(instances)))
    keep = set(ids)
    return ({i: r for i, r in instances.items() if i in keep}, {i: r for i, r in predictions.items() if i in keep})


def main(argv: list[str] | None = None) -> dict:
    """Run the CLI; returns the report (`python -m` exits with `exit_code(report)`)."""
    args = build_parser().parse_args(argv)
    for flag in ("instances", "predictions"):
        if not getattr(args, flag).is_file():
            raise FileNotFoundError(f"--{flag} {getattr(args, flag)}: no such file")
    if args.out.exists() and not args.out.is_dir():
        raise FileExistsError(f"--out {args.out}: a file, not a folder")
    if args.executor == "local" and not args.repos.is_dir():  # else every instance read as "out of reach"
        raise FileNotFoundError(f"--repos {args.repos}: no such folder (the clones: owner__name, owner__name.git or "
                                "owner__name.bundle)")
    for flag in ("timeout", "setup_timeout", "memory_gb"):
        if getattr(args, flag) <= 0:
            raise ValueError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be > 0")
    if args.instance_ids and any("," in i for i in args.instance_ids):
        raise ValueError(f"--instance_ids {' '.join(args.instance_ids)}: ids are separated by spaces, not commas")
    instances = index_instances(args.instances)
    predictions, errors = load_predictions(args.predictions)
    instances, predictions = select(instances, predictions, args.instance_ids)
    args.out.mkdir(parents=True, exist_ok=True)
    harness = Harness(instances, make_executor(args), args.out, args.workers, {  # what the report evaluated
        "instances_file": str(args.instances), "predictions_file": str(args.predictions),
        "model_names": sorted({str(p["model_name_or_path"]) for p in predictions.values()})})
    try:
        report = harness.run(predictions, errors, progress=not args.no_progress)
    except KeyboardInterrupt:
        report = json.loads((args.out / "report.json").read_text())
        print(f"\ninterrupted: {report['completed_instances']} graded, {len(report['pending_ids'])} not; the report "
              f"of what finished is {args.out / 'report.json'}; run the same command again to grade the rest",
              file=sys.stderr, flush=True)
        raise
    for error in report["prediction_errors"]:
        print(f"skipped prediction: {error['error']}", file=sys.stderr)
    for text in reach.report_lines(report):
        print(text)
    print(f"report: {args.out / 'report.json'}")
    print(summary(report))
    print(outcomes.rate_line(report["outcome_counts"]))
    return report


if __name__ == "__main__":
    try:
        sys.exit(exit_code(main()))
    except (ValueError, FileNotFoundError, FileExistsError) as err:  # bad input: one line naming it
        print(f"python -m swerl_jax.eval.harness: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        os._exit(130)  # the report is written; running sandboxes die with us (--die-with-parent)
