"""End to end on the DirectRunner: one pipeline run over the test world, then every record and funnel count."""

from __future__ import annotations

import glob
import json
import os

import pytest
import unidiff

from swerl_jax.curate import pipeline, sinks
from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.runner import run_curation
from swerl_jax.data.records import read_records, validate_record
from tests.curate.builders import CORE_V0, CORE_V1, EXTRA, UTIL_V0, UTIL_V1, WIDGET_OUTCOMES, build_world

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def kept_benchmarks(**fields) -> CurateConfig:
    """The test world's settings: its PRs are no SWE-bench instances (and the default lists need the network)."""
    return CurateConfig(drop_benchmark_instances=False, **fields)


RECORD_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "code_context", "oracle_new_content",
                 "oracle_patch", "created_at", "source")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("curate")
    info = build_world(root)
    out = root / "out"
    funnel = run_curation(str(root / "clones"), str(out), kept_benchmarks(num_shards=2), [str(root / "events.jsonl")],
                          [str(root / "issues.jsonl")], IN_MEMORY, verbose=False)
    return root, info, out, funnel


def _read(out, dataset):
    rows = {}
    for path in sorted(glob.glob(f"{out}/{dataset}/*.jsonl")):
        for line in open(path):
            r = json.loads(line)
            rows[r["instance_id"]] = r
    return rows


def test_funnel_counts_every_reason(world):
    _, _, out, funnel = world
    assert json.loads((out / "funnel.json").read_text())["stages"] == funnel["stages"]
    assert funnel["pr_candidates"] == 19
    drops = {s["stage"]: s["dropped"] for s in funnel["stages"]}
    assert drops == {r: 1 for r in ("not_merged", "no_clone", "bot", "missing_object", "non_utf8", "empty",
                                    "too_large", "lock_only", "version_bump", "docs_only",
                                    "generated_or_binary_only", "no_problem_statement", "duplicate")}
    assert [s["remaining"] for s in funnel["stages"]] == list(range(18, 5, -1))
    assert funnel["kept"] == 6 and funnel["rl_seeds"] == 1
    assert {s["stage"]: s["dropped"] for s in funnel["rl_seed_stages"]} == {
        "no_linked_issue": 2, "linked_issue_text_unknown": 1, "issue_not_bug_fix": 1, "non_programming_files": 1}
    assert funnel["inputs"] == {"bad_clone_name": 1, "corrupt_repo:not_a_repository": 1, "malformed_event": 1,
                                "repo": 3, "unparsable_event": 1, "unparsable_issue": 1}


def test_every_pr_outcome(world):
    _, _, out, _ = world
    dropped = {iid: r["reason"] for iid, r in _read(out, "dropped").items()}
    expected = {f"acme__widget-{n}": why for n, why in WIDGET_OUTCOMES.items() if why != "kept"}
    assert dropped == {**expected, "acme__widget-20": "not_merged", "ghost__missing-5": "no_clone"}
    kept = {f"acme__widget-{n}" for n, why in WIDGET_OUTCOMES.items() if why == "kept"}
    assert kept | {"acme__gadget-1"} == set(_read(out, "records"))


def test_records_schema_and_ids(world):
    _, _, out, _ = world
    records = _read(out, "records")
    assert sorted(records) == ["acme__gadget-1", "acme__widget-1", "acme__widget-12", "acme__widget-17",
                               "acme__widget-2", "acme__widget-7"]
    for iid, r in records.items():
        assert all(k in r for k in RECORD_FIELDS), iid
        assert all(isinstance(v, str) for v in r["code_context"].values())
        assert r["problem_statement"].strip()
        validate_record(r, where=iid)
    # The loaders' reader accepts every published shard of both formats.
    for path in glob.glob(f"{out}/records/*-of-*.*"):
        assert all(r["instance_id"] in records for r in read_records(path))


def test_merge_commit_pr_with_linked_issue_from_events(world):
    root, info, out, _ = world
    r = _read(out, "records")["acme__widget-1"]
    # Events give base/head; the base is the merge base, not main's tip at merge time (squash #2 landed since).
    assert r["base_commit"] == info["pr1"]["start"] != info["pr2"]
    assert r["source"] == "github-issue"
    assert r["problem_statement"] == "Crash on empty input\nrun('') raises IndexError\n"
    assert r["oracle_new_content"] == {"src/widget/core.py": CORE_V1}
    assert r["code_context"]["src/widget/core.py"] == CORE_V0
    assert r["created_at"] == "2024-01-01T00:00:10Z"
    # Heuristic relevant files: the modified file's siblings at the base, with their base contents.
    assert r["relevant_files"] == ["src/widget/__init__.py", "src/widget/legacy.py", "src/widget/util.py"]
    assert r["code_context"]["src/widget/util.py"] == UTIL_V0
    assert set(r["code_context"]) == {"src/widget/core.py", *r["relevant_files"]}
    patch = unidiff.PatchSet(r["oracle_patch"])
    assert [f.path for f in patch] == ["src/widget/core.py"] and patch[0].added == 2
    meta = _read(out, "meta")["acme__widget-1"]
    assert [c["user"] for c in meta["conversation"]] == ["bob", "carol"]  # sorted by time, not arrival
    assert meta["linked_issues"] == [10] and meta["kind"] == "events"
    assert list(_read(out, "rl_seeds")) == ["acme__widget-1"]


def test_squash_pr_with_added_file(world):
    _, info, out, _ = world
    r = _read(out, "records")["acme__widget-2"]
    assert r["base_commit"] == info["initial"]
    assert r["oracle_new_content"] == {"src/widget/util.py": UTIL_V1, "src/widget/extra.py": EXTRA}
    assert r["code_context"]["src/widget/util.py"] == UTIL_V0
    assert "src/widget/extra.py" not in r["code_context"]  # added files have no base content
    assert r["source"] == "github-pr" and r["problem_statement"] == "Add helper2 to util\n"


def test_merge_without_title_falls_back_to_commit_messages(world):
    _, _, out, _ = world
    r = _read(out, "records")["acme__widget-17"]
    assert r["problem_statement"] == "Add untitled module\n\nNeeded for U.\n" and r["source"] == "github-commits"
    assert r["oracle_new_content"] == {"src/widget/untitled.py": "U = 1\n"}


def test_rename_and_binary_file(world):
    _, _, out, _ = world
    r = _read(out, "records")["acme__widget-7"]
    new = r["oracle_new_content"]
    assert new["src/widget/util.py"] == ""  # the old path disappears
    assert new["src/widget/helpers.py"] == UTIL_V1.replace("return 2", "return 3")
    assert r["code_context"]["src/widget/util.py"] == UTIL_V1
    assert "assets/logo.png" not in new and "assets/logo.png" not in r["code_context"]
    files = {f.path: f for f in unidiff.PatchSet(r["oracle_patch"])}
    assert files["src/widget/helpers.py"].is_rename and files["assets/logo.png"].is_binary_file


def test_duplicate_keeps_earliest_and_bare_clone(world):
    _, _, out, _ = world
    records = _read(out, "records")
    assert "acme__widget-13" not in records and records["acme__widget-12"]["oracle_new_content"] == {
        "src/widget/helpers.py": UTIL_V0, "src/widget/extra.py": ""}
    g = records["acme__gadget-1"]
    assert g["oracle_new_content"] == {"parser.py": "def parse(s):\n    return s.split(',') if s else []\n"}
    assert _read(out, "meta")["acme__gadget-1"]["linked_issues"] == [3]


def test_shards_are_complete_and_array_record_matches_jsonl(world):
    from array_record.python.array_record_module import ArrayRecordReader

    root, _, out, _ = world
    for dataset in ("records", "rl_seeds"):
        manifest = json.loads((out / dataset / "_MANIFEST.json").read_text())
        assert sorted(os.listdir(out / dataset)) == sorted([*manifest["shards"], "_MANIFEST.json"])
        assert len(manifest["shards"]) == 4  # 2 shards x 2 formats, empty shards included
        from_ar = {}
        for path in glob.glob(f"{out}/{dataset}/*.array_record"):
            reader = ArrayRecordReader(path)
            for raw in reader.read_all():
                rec = json.loads(raw)
                from_ar[rec["instance_id"]] = rec
            reader.close()
        assert from_ar == _read(out, dataset)
    assert not [p for p in os.listdir(out) if p.startswith(".")]  # staging removed


def test_failed_run_publishes_nothing(world, tmp_path, monkeypatch):
    root, _, _, _ = world
    out = tmp_path / "out"
    (out / "records").mkdir(parents=True)
    (out / "records" / "records-00000-of-00001.jsonl").write_text('{"old": 1}\n')

    def half_then_fail(path, records, validate=True):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:  # a shard cut short where the pipeline's staging keeps it
            f.write(json.dumps(records[0])[:50] if records else "{")
        raise OSError("disk full (injected)")

    monkeypatch.setattr(sinks, "write_records", half_then_fail)
    with pytest.raises(Exception, match="disk full"):
        run_curation(str(root / "clones"), str(out), kept_benchmarks(num_shards=1), beam_args=IN_MEMORY, verbose=False)
    assert sorted(os.listdir(out)) == ["records"]  # no staging folder, no funnel.json
    assert os.listdir(out / "records") == ["records-00000-of-00001.jsonl"]
    assert (out / "records" / "records-00000-of-00001.jsonl").read_text() == '{"old": 1}\n'


def test_unexpected_error_is_counted_not_fatal(world, tmp_path, monkeypatch):
    root, _, _, _ = world
    clones = tmp_path / "clones"
    clones.mkdir()
    (clones / "acme__gadget.git").symlink_to(root / "clones" / "acme__gadget.git")

    def boom(*args):
        raise RuntimeError("unforeseen")

    monkeypatch.setattr(pipeline, "extract_pr", boom)
    funnel = run_curation(str(clones), str(tmp_path / "out"), kept_benchmarks(num_shards=1), beam_args=IN_MEMORY,
                          verbose=False)
    assert funnel["stages"] == [{"stage": "extract_error", "dropped": 1, "remaining": 0}] and funnel["kept"] == 0


def test_the_default_runner_never_tries_prism(world, tmp_path, monkeypatch):
    """Beam 2.77's DirectRunner first tries Prism, which downloads a Go binary from GitHub at run time and, where it
    can, runs the pipeline there instead of the FnApiRunner the tests exercise: the default names FnApiRunner."""
    from apache_beam.runners.portability import prism_runner

    root, _, _, _ = world
    tried = []

    class NoPrism(prism_runner.PrismRunner):
        def run_pipeline(self, *args, **kwargs):
            tried.append(True)
            raise RuntimeError("prism is off in this test")

    monkeypatch.setattr(prism_runner, "PrismRunner", NoPrism)
    clones = tmp_path / "clones"
    clones.mkdir()
    (clones / "acme__gadget.git").symlink_to(root / "clones" / "acme__gadget.git")
    funnel = run_curation(str(clones), str(tmp_path / "out"), kept_benchmarks(num_shards=1), beam_args=IN_MEMORY,
                          verbose=False)
    assert funnel["kept"] > 0 and not tried
    run_curation(str(clones), str(tmp_path / "direct"), kept_benchmarks(num_shards=1),
                 beam_args=[*IN_MEMORY, "--runner=DirectRunner"], verbose=False)
    assert tried  # the check can fail: the DirectRunner does try Prism


def test_benchmark_instances_are_dropped_as_their_own_stage_unless_switched_off(world, tmp_path):
    """Issue 57 item 5: a PR that is a SWE-bench instance (here acme__gadget-1, named in a benchmark file of the
    SWE-bench format) is left out of the records and counted as the funnel stage benchmark_instance."""
    root, _, _, _ = world
    clones = tmp_path / "clones"
    clones.mkdir()
    (clones / "acme__gadget.git").symlink_to(root / "clones" / "acme__gadget.git")
    lite = tmp_path / "lite.json"
    lite.write_text(json.dumps([{"instance_id": "acme__gadget-1", "repo": "Acme/Gadget"},
                                {"instance_id": "acme__gadget-99", "repo": "acme/gadget"}]))
    config = CurateConfig(num_shards=1, formats=("jsonl",), benchmark_instances=(str(lite),))
    funnel = run_curation(str(clones), str(tmp_path / "on"), config, beam_args=IN_MEMORY, verbose=False)
    assert funnel["stages"] == [{"stage": "benchmark_instance", "dropped": 1, "remaining": 0}]
    assert funnel["pr_candidates"] == 1 and funnel["kept"] == 0
    assert {iid: r["reason"] for iid, r in _read(tmp_path / "on", "dropped").items()} == {
        "acme__gadget-1": "benchmark_instance"}
    kept = run_curation(str(clones), str(tmp_path / "off"), CurateConfig(
        num_shards=1, formats=("jsonl",), drop_benchmark_instances=False, benchmark_instances=(str(lite),)),
        beam_args=IN_MEMORY, verbose=False)
    assert kept["kept"] == 1 and list(_read(tmp_path / "off", "records")) == ["acme__gadget-1"]
    # a list that cannot be read is one line naming the key and the way out, before Beam starts
    with pytest.raises(ValueError, match=r"--config.benchmark_instances: cannot read .*nosuch.json.*"
                                         r"--config.drop_benchmark_instances=false"):
        run_curation(str(clones), str(tmp_path / "bad"),
                     CurateConfig(benchmark_instances=(str(tmp_path / "nosuch.json"),)), beam_args=IN_MEMORY,
                     verbose=False)
    assert not (tmp_path / "bad").exists()
