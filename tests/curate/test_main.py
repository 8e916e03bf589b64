"""The command line on the default multi-process FnApiRunner (2 workers) gives the in-memory run's results."""

import json

import pytest

from swerl_jax.curate.__main__ import main, parse_args
from tests.curate.builders import build_world


def test_flags_split_between_ours_and_beams():
    args, beam = parse_args(["--clones", "c", "--out", "o", "--config.max_changed_lines=50", "--config.formats=jsonl",
                             "--runner=FlinkRunner", "--flink_master=h:8081"])
    assert args.max_changed_lines == 50 and args.formats == ("jsonl",) and args.num_shards == 4
    assert beam == ["--runner=FlinkRunner", "--flink_master=h:8081"]
    with pytest.raises(KeyError, match="unknown config key max_changed_line; did you mean max_changed_lines"):
        parse_args(["--clones", "c", "--out", "o", "--config.max_changed_line=50"])


@pytest.mark.slow
def test_cli_multiprocess(tmp_path, capsys):
    build_world(tmp_path)
    out = tmp_path / "out"
    rc = main(["--clones", str(tmp_path / "clones"), "--events", str(tmp_path / "events.jsonl"),
               "--issues", str(tmp_path / "issues.jsonl"), "--out", str(out), "--config.num_shards=3",
               "--config.formats=jsonl"])
    assert rc == 0
    funnel = json.loads((out / "funnel.json").read_text())
    assert funnel["pr_candidates"] == 19 and funnel["kept"] == 6 and funnel["rl_seeds"] == 1
    assert "= PR records" in capsys.readouterr().out
    ids = sorted(json.loads(line)["instance_id"] for p in (out / "records").glob("*.jsonl") for line in open(p))
    assert ids == ["acme__gadget-1", "acme__widget-1", "acme__widget-12", "acme__widget-17", "acme__widget-2",
                   "acme__widget-7"]
    assert not list((out / "records").glob("*.array_record"))
