"""The command line on the default multi-process FnApiRunner (2 workers) gives the in-memory run's results."""

import json

import pytest

from swerl_jax.curate.__main__ import check_beam_flags, check_inputs, main, parse_args
from tests.curate.builders import build_world


def test_flags_split_between_ours_and_beams():
    args, beam = parse_args(["--clones", "c", "--out", "o", "--config.max_changed_lines=50", "--config.formats=jsonl",
                             "--runner=FlinkRunner", "--flink_master=h:8081"])
    assert args.max_changed_lines == 50 and args.formats == ("jsonl",) and args.num_shards == 4
    assert beam == ["--runner=FlinkRunner", "--flink_master=h:8081"]
    with pytest.raises(KeyError, match="unknown config key max_changed_line; did you mean max_changed_lines"):
        parse_args(["--clones", "c", "--out", "o", "--config.max_changed_line=50"])


def test_a_flag_nobody_knows_and_inputs_that_are_not_there_are_named(tmp_path):
    """New-user check: `--isues F` went to Beam, which logged "Discarding unparseable args" and ran without
    issues; an empty --clones, a bundle there and a missing --events file each ran to "0 records"."""
    check_beam_flags(["--runner=FlinkRunner", "--flink_master=h:8081", "--direct_num_workers=2",
                      "--experiment=use_runner_v2", "--no_use_public_ips", "--label", "a=b", "--extra_package",
                      "p.tgz"], ["issues"])  # Beam's own parser decides (a review found these refused)
    with pytest.raises(ValueError, match=r"unknown flag --temp-location; did you mean --temp_location\?"):
        check_beam_flags(["--temp-location=gs://b/tmp"], ["issues"])  # Beam discards the hyphen form
    with pytest.raises(ValueError, match=r"unknown flag --isues; did you mean --issues\?"):
        check_beam_flags(["--isues", "x.jsonl"], ["clones", "out", "events", "issues"])
    clones = tmp_path / "clones"
    clones.mkdir()
    (clones / "o__r.bundle").write_text("")
    with pytest.raises(FileNotFoundError, match="no clones in it"):
        check_inputs(str(clones), [], [])
    (clones / "o__r.git").mkdir()
    check_inputs(str(clones), [], [])
    with pytest.raises(FileNotFoundError, match=r"--events .*nosuch.json.gz: no such file"):
        check_inputs(str(clones), [str(tmp_path / "nosuch.json.gz")], [])
    with pytest.raises(FileNotFoundError, match="no such folder"):
        check_inputs(str(tmp_path / "nosuch"), [], [])
    check_inputs(str(clones), ["gs://bucket/events-*.json.gz"], [])  # Beam reads remote files itself


@pytest.mark.slow
def test_cli_multiprocess(tmp_path, capfd):
    """Also issue 57 item 7: Beam's workers' INFO lines were 36 of curation's 62; they are left out (its warnings
    stay) and a bar names curation's stage."""
    build_world(tmp_path)
    out = tmp_path / "out"
    rc = main(["--clones", str(tmp_path / "clones"), "--events", str(tmp_path / "events.jsonl"),
               "--issues", str(tmp_path / "issues.jsonl"), "--out", str(out), "--config.num_shards=3",
               "--config.formats=jsonl", "--config.drop_benchmark_instances=false"])
    assert rc == 0
    funnel = json.loads((out / "funnel.json").read_text())
    assert funnel["pr_candidates"] == 19 and funnel["kept"] == 6 and funnel["rl_seeds"] == 1
    captured = capfd.readouterr()
    assert "= PR records" in captured.out
    assert not [line for line in captured.err.splitlines() if line.startswith("INFO:")], captured.err
    assert "curate: Beam pipeline (1 event, 1 issue files" in captured.err
    assert "curate: publishing records, rl_seeds, meta, dropped" in captured.err
    ids = sorted(json.loads(line)["instance_id"] for p in (out / "records").glob("*.jsonl") for line in open(p))
    assert ids == ["acme__gadget-1", "acme__widget-1", "acme__widget-12", "acme__widget-17", "acme__widget-2",
                   "acme__widget-7"]
    assert not list((out / "records").glob("*.array_record"))


def test_info_lines_are_filtered_from_stderr_and_children_unless_verbose(capfd):
    """The filter works on file descriptor 2, so Beam's worker subprocesses' INFO lines go too; warnings, errors and
    other lines pass, in order; off (--verbose), everything passes."""
    import subprocess
    import sys

    from swerl_jax.curate.quiet import info_filtered_stderr, is_info

    child = ("import sys; sys.stderr.write('INFO:__main__:Logging handler created.\\nWARNING:root:kept\\n"
             "I1207 01:23:45.678 grpc chatter\\nTraceback: kept too\\n')")
    for on in (True, False):
        with info_filtered_stderr(on=on):
            subprocess.run([sys.executable, "-c", child], check=True)
        err = capfd.readouterr().err
        expect = ["WARNING:root:kept", "Traceback: kept too"]
        if not on:
            expect = ["INFO:__main__:Logging handler created.", expect[0], "I1207 01:23:45.678 grpc chatter", expect[1]]
        assert err.splitlines() == expect
    assert is_info(b"INFO:apache_beam.runners.worker.sdk_worker:Control channel established.\n")
    assert not is_info(b"WARNING:root:apitools not found\n") and not is_info(b"INFORMATION\n")
