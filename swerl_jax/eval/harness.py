"""The SWE-bench harness CLI: grade predictions in the sandbox, write report.json, print `resolved N/M`.

    python -m swerl_jax.eval.harness --instances FILE --predictions FILE --repos DIR --out DIR [--workers N]

Per run, everything goes under --out: results/<id>.json (one per finished instance: what makes the run
resumable), logs/<id>/ (env_build / setup / patch / test logs), work/<id>/ (removed after grading unless
--keep-workdirs), repos/ (bare clones unpacked from .bundle files) and report.json. The cached environments live
in $SWERL_JAX_HOME/eval/envs (or --env-cache), shared between runs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import pathlib
import re
import shutil
import sys
import threading
import traceback

from tqdm import tqdm

from swerl_jax.eval import environments
from swerl_jax.eval.executors import DockerExecutor, LocalExecutor
from swerl_jax.eval.sandbox import SandboxLimits, bwrap_path

PREDICTION_FIELDS = ("instance_id", "model_name_or_path", "model_patch")
# An instance id names files and folders under --out: letters, digits, '_', '-', '.', not starting with '.'.
SAFE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")


def safe_id(instance_id: object) -> bool:
    """Whether `instance_id` can name a file under --out (no '/', no '..', no leading '.', at most 200 chars)."""
    return isinstance(instance_id, str) and SAFE_ID.fullmatch(instance_id) is not None


def load_instances(path: pathlib.Path) -> dict[str, dict]:
    """SWE-bench instances from a JSON list or JSONL file, by instance_id (errors name the file and line)."""
    text = pathlib.Path(path).read_text()
    if text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{number}: not a JSON object: {err}") from err
    instances = {}
    for number, row in enumerate(rows, 1):
        missing = [k for k in ("instance_id", "repo", "base_commit", "test_patch", "version") if k not in row]
        if missing:
            raise ValueError(f"{path}: instance #{number} ({row.get('instance_id', '?')}) lacks {missing}")
        if not safe_id(row["instance_id"]):
            raise ValueError(f"{path}: instance #{number}: instance_id {row['instance_id']!r} cannot name a file "
                             f"(allowed: {SAFE_ID.pattern})")
        instances[row["instance_id"]] = row
    return instances


def load_predictions(path: pathlib.Path) -> tuple[dict[str, dict], list[dict]]:
    """Predictions JSONL -> ({instance_id: prediction}, [per-line errors]). A bad line is reported, not fatal."""
    predictions, errors = {}, []
    for number, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            errors.append({"line": number, "status": "malformed_prediction", "error": f"{where}: bad JSON: {err}"})
            continue
        if not isinstance(row, dict) or any(k not in row for k in PREDICTION_FIELDS):
            errors.append({"line": number, "status": "malformed_prediction", "instance_id": row.get("instance_id")
                           if isinstance(row, dict) else None, "error": f"{where}: needs fields {PREDICTION_FIELDS}"})
            continue
        if not isinstance(row["instance_id"], str):
            errors.append({"line": number, "status": "malformed_prediction", "instance_id": None,
                           "error": f"{where}: instance_id must be a string, got {type(row['instance_id']).__name__}"})
            continue
        if not isinstance(row["model_patch"], str) and row["model_patch"] is not None:
            errors.append({"line": number, "status": "malformed_prediction", "instance_id": row["instance_id"],
                           "error": f"{where}: model_patch must be a string"})
            continue
        if row["instance_id"] in predictions:
            errors.append({"line": number, "status": "duplicate_prediction", "instance_id": row["instance_id"],
                           "error": f"{where}: second prediction for {row['instance_id']} (the first is graded)"})
            continue
        predictions[row["instance_id"]] = {**row, "model_patch": row["model_patch"] or ""}
    return predictions, errors


def _patch_digest(patch: str) -> str:
    return hashlib.sha256(patch.encode()).hexdigest()


class Harness:
    """Grades predictions with an executor, N at a time, resumable through OUT/results/<id>.json."""

    def __init__(self, instances: dict[str, dict], executor, out_dir: pathlib.Path, workers: int = 1):
        self.instances, self.executor, self.out_dir, self.workers = instances, executor, out_dir, workers
        self.results_dir = out_dir / "results"
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def _finished(self, iid: str, patch: str) -> dict | None:
        path = self.results_dir / f"{iid}.json"
        if path.exists():
            result = json.loads(path.read_text())
            # A changed prediction is graded again, and so is one the harness itself crashed on.
            if result.get("patch_sha256") == _patch_digest(patch) and not result.get("harness_crash"):
                return result
        return None

    def _grade_one(self, prediction: dict) -> dict:
        iid, patch = prediction["instance_id"], prediction["model_patch"]
        log_dir = self.out_dir / "logs" / iid
        shutil.rmtree(log_dir, ignore_errors=True)  # a re-graded instance's logs are all from this attempt
        log_dir.mkdir(parents=True)
        base = {"instance_id": iid, "model_name_or_path": prediction["model_name_or_path"],
                "patch_sha256": _patch_digest(patch), "empty_patch": not patch.strip(), "log_dir": str(log_dir)}
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
            if done is not None:
                results[iid] = done
            else:
                todo.append(prediction)
        bar = tqdm(total=len(todo), desc="instances", disable=not progress, file=sys.stderr)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.workers)) as pool:
            futures = [pool.submit(self._grade_one, p) for p in todo]
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                with self._lock:
                    results[result["instance_id"]] = result
                    bar.update(1)
                    bar.set_postfix(resolved=sum(r["resolved"] for r in results.values()))
        bar.close()
        return write_report(self.out_dir, results, errors, len(self.instances))


def write_report(out_dir: pathlib.Path, results: dict[str, dict], errors: list[dict], n_instances: int) -> dict:
    """report.json in the official harness's shape (id lists and counts) plus per-instance entries."""
    ids = sorted(results)

    def having(pred) -> list[str]:
        return [i for i in ids if pred(results[i])]

    report = {
        "total_instances": n_instances,
        "submitted_instances": len(results) + len(errors),
        "completed_instances": len(having(lambda r: r["status"] in ("resolved", "unresolved"))),
        "resolved_instances": len(having(lambda r: r["resolved"])),
        "unresolved_instances": len(having(lambda r: r["status"] == "unresolved")),
        "empty_patch_instances": len(having(lambda r: r["empty_patch"])),
        "error_instances": len(having(lambda r: r["status"] not in ("resolved", "unresolved"))) + len(errors),
        "completed_ids": having(lambda r: r["status"] in ("resolved", "unresolved")),
        "resolved_ids": having(lambda r: r["resolved"]),
        "unresolved_ids": having(lambda r: r["status"] == "unresolved"),
        "empty_patch_ids": having(lambda r: r["empty_patch"]),
        "error_ids": having(lambda r: r["status"] not in ("resolved", "unresolved")),
        "instances": {i: results[i] for i in ids},
        "prediction_errors": errors,
        "schema_version": 2,
    }
    tmp = out_dir / ".report.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, out_dir / "report.json")
    return report


def build_parser() -> argparse.ArgumentParser:
    """The CLI's arguments."""
    p = argparse.ArgumentParser(prog="python -m swerl_jax.eval.harness", description=__doc__.split("\n\n")[0])
    p.add_argument("--instances", type=pathlib.Path, required=True, help="SWE-bench instances (JSON list or JSONL)")
    p.add_argument("--predictions", type=pathlib.Path, required=True, help="JSONL: " + ", ".join(PREDICTION_FIELDS))
    p.add_argument("--repos", type=pathlib.Path, required=True, help="clones: owner__name[.git] or owner__name.bundle")
    p.add_argument("--out", type=pathlib.Path, required=True, help="run dir (report.json, logs, results)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--executor", choices=("local", "docker"), default="local")
    p.add_argument("--env-cache", type=pathlib.Path, default=None, help="default $SWERL_JAX_HOME/eval/envs")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for an instance's tests (and patching)")
    p.add_argument("--setup-timeout", type=float, default=1800.0, help="seconds for an instance's install step")
    p.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap of sandboxed commands")
    p.add_argument("--keep-workdirs", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    return p


def make_executor(args: argparse.Namespace):
    """The executor the arguments ask for (bubblewrap checked up front: a clear error, not N failed instances)."""
    limits = SandboxLimits(memory_bytes=int(args.memory_gb * (1 << 30)), timeout_s=args.timeout,
                           cpu_seconds=int(args.timeout) + 60)
    if args.executor == "docker":
        return DockerExecutor(args.out, limits)
    bwrap_path()
    return LocalExecutor(args.repos, args.out, environments.EnvironmentCache(args.env_cache), limits,
                         keep_workdirs=args.keep_workdirs, setup_timeout_s=args.setup_timeout)


def main(argv: list[str] | None = None) -> dict:
    """Run the CLI; returns the report."""
    args = build_parser().parse_args(argv)
    instances = load_instances(args.instances)
    predictions, errors = load_predictions(args.predictions)
    args.out.mkdir(parents=True, exist_ok=True)
    harness = Harness(instances, make_executor(args), args.out, args.workers)
    report = harness.run(predictions, errors, progress=not args.no_progress)
    for error in report["prediction_errors"]:
        print(f"skipped prediction: {error['error']}", file=sys.stderr)
    print(f"report: {args.out / 'report.json'}")
    print(f"resolved {report['resolved_instances']}/{report['submitted_instances']}")
    return report


if __name__ == "__main__":
    main()
