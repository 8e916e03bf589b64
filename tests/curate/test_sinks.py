"""Shard writing and publishing."""

import json

import pytest

from swerl_jax.curate import sinks
from swerl_jax.data.records import RecordError


def test_shard_index_is_stable():
    assert sinks.shard_index("psf__requests-1", 4) == sinks.shard_index("psf__requests-1", 4)
    assert {sinks.shard_index(f"a-{i}", 4) for i in range(100)} == {0, 1, 2, 3}
    assert sinks.shard_name("records", 1, 4, "jsonl") == "records-00001-of-00004.jsonl"


def test_write_and_publish(tmp_path):
    staging, out = tmp_path / ".staging", tmp_path / "out"
    rows = [{"instance_id": "b", "v": "é"}, {"instance_id": "a", "v": 1}]
    sinks.write_shard(str(staging), "meta", 1, 3, rows, ["jsonl", "array_record"])
    (out / "meta").mkdir(parents=True)
    (out / "meta" / "meta-00000-of-00005.jsonl").write_text("stale\n")
    published = sinks.publish(str(staging), str(out), "meta", 3, ["jsonl", "array_record"])
    names = sorted(p.split("/")[-1] for p in published)
    assert names == sorted(f"meta-0000{i}-of-00003.{e}" for i in range(3) for e in ("jsonl", "array_record"))
    assert sorted(p.name for p in (out / "meta").iterdir()) == sorted([*names, "_MANIFEST.json"])
    lines = (out / "meta" / "meta-00001-of-00003.jsonl").read_text().splitlines()
    assert [json.loads(x)["instance_id"] for x in lines] == ["a", "b"]  # sorted within a shard
    assert (out / "meta" / "meta-00000-of-00003.jsonl").read_text() == ""
    from array_record.python.array_record_module import ArrayRecordReader

    reader = ArrayRecordReader(str(out / "meta" / "meta-00001-of-00003.array_record"))
    assert [json.loads(r) for r in reader.read_all()] == [rows[1], rows[0]]
    reader.close()
    assert not list((staging / "meta").iterdir())  # everything moved


def test_pr_record_shards_are_validated(tmp_path):
    with pytest.raises(RecordError, match="missing field"):
        sinks.write_shard(str(tmp_path), "records", 0, 1, [{"instance_id": "x"}], ["jsonl"])
    assert not list((tmp_path / "records").iterdir())  # nothing half-written
