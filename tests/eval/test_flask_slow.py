"""End to end on real SWE-bench Lite flask instances: gold resolves, empty does not, bad input is per instance.

Builds (once, then cached in $SWERL_JAX_HOME/eval/envs) the flask 2.0 / Python 3.9 and flask 2.3 / Python 3.11
environments from the SWE-bench specs: the first run needs pip to reach the package index and takes minutes.
"""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from swerl_jax.eval import harness
from swerl_jax.tasks import environments

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]
FLASK = ("pallets__flask-4045", "pallets__flask-4992", "pallets__flask-5063")
REPO = pathlib.Path(__file__).resolve().parents[2]


def write_predictions(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_flask_gold_resolves_empty_does_not_bad_input_is_per_instance(shared_data, tmp_path, capsys):
    for version in ("3.9", "3.11"):  # a missing interpreter fails here with the harness's error naming it
        environments.find_python(version)
    lite = {r["instance_id"]: r for r in json.loads((shared_data / "swebench_lite.json").read_text())}
    # Copies under other ids let one run (sharing setup) grade gold, empty and broken predictions side by side.
    copies = [{**lite[i], "instance_id": f"{i}-empty"} for i in FLASK]
    copies.append({**lite["pallets__flask-4992"], "instance_id": "pallets__flask-4992-wrongpatch"})
    copies.append({**lite["pallets__flask-4992"], "instance_id": "pallets__flask-4992-badenv", "version": "0.1"})
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps([lite[i] for i in FLASK] + copies))

    def pred(iid, patch, model):
        return {"instance_id": iid, "model_name_or_path": model, "model_patch": patch}

    bogus = ("diff --git a/src/flask/app.py b/src/flask/app.py\n--- a/src/flask/app.py\n+++ b/src/flask/app.py\n"
             "@@ -1,3 +1,3 @@\n-no such\n-lines in\n-flask\n+x\n+y\n+z\n")
    write_predictions(tmp_path / "mixed.jsonl", [pred(i, lite[i]["patch"], "gold") for i in FLASK]
                      + [pred(f"{i}-empty", "", "empty") for i in FLASK]
                      + ["{broken", pred("pallets__flask-9999", "", "x"), pred("pallets__flask-4992-badenv", "", "x"),
                         pred("pallets__flask-4992-wrongpatch", bogus, "wrong")])
    # A model patch whose code hangs at import: the tests must be killed by the timeout.
    hang = lite["pallets__flask-5063"]["patch"].replace("@@ -9,7 +9,7 @@", "@@ -9,7 +9,8 @@", 1).replace(
        "+from operator import itemgetter\n", "+from operator import itemgetter\n+import time; time.sleep(100000)\n", 1)
    assert hang.count("time.sleep") == 1
    write_predictions(tmp_path / "hang.jsonl", [pred("pallets__flask-5063", hang, "hang")])

    # --repos holds a link to a bare clone: the instance clone's alternates must name a path the sandbox shows
    # (regression: through the link under the private /tmp, the test files' reset to the base commit failed).
    store, repos = tmp_path / "store" / "flask.git", tmp_path / "repos"
    subprocess.run(["git", "clone", "-q", "--bare", str(shared_data / "repos" / "pallets__flask.bundle"), str(store)],
                   check=True)
    repos.mkdir()
    (repos / "pallets__flask.git").symlink_to(store)

    # The hang's run waits out its timeout: it goes in a process of its own beside the mixed run (sharing the
    # cached environments, which are built under a file lock).
    with open(tmp_path / "hang.log", "w") as hang_log:
        hang_run = subprocess.Popen(
            [sys.executable, "-m", "swerl_jax.eval.harness", "--instances", str(instances), "--predictions",
             str(tmp_path / "hang.jsonl"), "--repos", str(repos), "--out", str(tmp_path / "hang"), "--workers", "1",
             "--no-progress", "--timeout", "20"], cwd=REPO, stdout=hang_log, stderr=subprocess.STDOUT)

    def run(name, *extra):
        out = tmp_path / name
        report = harness.main(["--instances", str(instances), "--predictions", str(tmp_path / f"{name}.jsonl"),
                               "--repos", str(repos), "--out", str(out), "--workers", "2",
                               "--no-progress", *extra])
        return report, capsys.readouterr().out.strip().splitlines()[-1]

    report, last = run("mixed")
    statuses = {i: r["status"] for i, r in report["instances"].items()}
    assert statuses == {**dict.fromkeys(FLASK, "resolved"), **{f"{i}-empty": "unresolved" for i in FLASK},
                        "pallets__flask-4992-badenv": "env_failed",
                        "pallets__flask-4992-wrongpatch": "patch_failed"}, report
    assert last == "resolved 3/8 (unresolved 0, empty patch 4, error 1, no prediction 0)"  # every instance
    assert [e["status"] for e in report["prediction_errors"]] == ["malformed_prediction", "unknown_instance"]
    assert report["unknown_ids"] == ["pallets__flask-9999"] and harness.exit_code(report) == 1
    assert "version '0.1'" in report["instances"]["pallets__flask-4992-badenv"]["error"]
    # calibration through both verdict paths (issue 56): the trusted plugin's record, from the same runs, agrees
    plugin = {i: r["plugin_verdict"]["status"] for i, r in report["instances"].items() if "plugin_verdict" in r}
    assert plugin == {**dict.fromkeys(FLASK, "resolved"), **{f"{i}-empty": "unresolved" for i in FLASK}}, report
    assert report["verdict_disagreement_ids"] == [] and report["tampered_ids"] == []
    for iid in FLASK:
        entry = report["instances"][iid]
        assert entry["FAIL_TO_PASS"]["passed"] == entry["FAIL_TO_PASS"]["total"] > 0
        assert report["instances"][f"{iid}-empty"]["FAIL_TO_PASS"]["passed"] == 0
        log = (tmp_path / "mixed" / "logs" / iid / "test.log").read_text()
        assert "PASSED" in log and "fatal:" not in log and "error:" not in log.split(">>>>> Start Test Output")[0]

    try:
        hang_run.wait(timeout=900)
    finally:
        if hang_run.poll() is None:
            hang_run.kill()
    report = json.loads((tmp_path / "hang" / "report.json").read_text())
    assert hang_run.returncode == harness.exit_code(report), (tmp_path / "hang.log").read_text()[-3000:]
    assert report["instances"]["pallets__flask-5063"]["status"] == "timeout", report["instances"]
