"""Choosing records (issue 57 item 7: "no option to score a subset of held-out records, and no split tool"): the
subset repair_score scores, and the seeded train / held-out split of record files."""

from __future__ import annotations

import pytest

from swerl_jax.data.__main__ import main as data_main
from swerl_jax.data.records import read_records, write_records
from swerl_jax.data.select import select_records, split_records
from swerl_jax.data.synthetic import synthetic_records

RECORDS = synthetic_records(40, seed=5)


def test_subset_by_instance_ids_and_limit(tmp_path):
    ids = [r["instance_id"] for r in RECORDS]
    got = select_records(RECORDS, f"{ids[7]},{ids[2]}", 0, "recs.jsonl")
    assert [r["instance_id"] for r in got] == [ids[2], ids[7]]  # the records' order
    (tmp_path / "ids.txt").write_text(f"{ids[3]}\n\n{ids[9]}\n{ids[1]}\n")
    got = select_records(RECORDS, f"@{tmp_path / 'ids.txt'}", 2, "recs.jsonl")
    assert [r["instance_id"] for r in got] == [ids[1], ids[3]]
    assert select_records(RECORDS, "", 5, "recs.jsonl") == RECORDS[:5]
    assert select_records(RECORDS, "", 0, "recs.jsonl") == RECORDS
    with pytest.raises(ValueError, match=rf"--instance_ids: '{ids[4]}x' is not a record of --records recs.jsonl "
                                         rf"\(40 records\) \(did you mean '{ids[4]}'\?\)"):
        select_records(RECORDS, f"{ids[0]},{ids[4]}x", 0, "recs.jsonl")
    with pytest.raises(ValueError, match=r"--limit -1: must be >= 0"):
        select_records(RECORDS, "", -1, "recs.jsonl")
    with pytest.raises(FileNotFoundError, match=r"--instance_ids @.*absent.txt: no such file"):
        select_records(RECORDS, f"@{tmp_path / 'absent.txt'}", 0, "recs.jsonl")


def test_split_is_seeded_order_free_and_by_repository_keeps_repositories_whole():
    train, heldout = split_records(RECORDS, 0.25, seed=1)
    assert len(train) + len(heldout) == 40 and 3 <= len(heldout) <= 20
    assert {r["instance_id"] for r in train}.isdisjoint(r["instance_id"] for r in heldout)
    again = split_records(list(reversed(RECORDS)), 0.25, seed=1)  # the order of the input does not matter
    assert sorted(r["instance_id"] for r in again[1]) == sorted(r["instance_id"] for r in heldout)
    assert split_records(RECORDS[:20], 0.25, seed=1)[1] == [r for r in heldout if r in RECORDS[:20]]
    other = split_records(RECORDS, 0.25, seed=2)[1]
    assert {r["instance_id"] for r in other} != {r["instance_id"] for r in heldout}
    records = [dict(r, repo=f"o/r{i % 8}") for i, r in enumerate(RECORDS)]
    train, heldout = split_records(records, 0.5, seed=0, by="repo")
    assert {r["repo"] for r in train}.isdisjoint(r["repo"] for r in heldout) and train and heldout


def test_split_refuses_bad_input_with_one_line():
    with pytest.raises(ValueError, match=r"--heldout-fraction 1.5: must be between 0 and 1"):
        split_records(RECORDS, 1.5, 0)
    with pytest.raises(ValueError, match=r"--by 'repos': not one of instance, repo \(did you mean 'repo'\?\)"):
        split_records(RECORDS, 0.5, 0, by="repos")
    one_repo = [dict(r, repo="psf/requests") for r in RECORDS]
    with pytest.raises(ValueError, match=r"a side is empty; change the fraction or the seed, or split --by instance"):
        split_records(one_repo, 0.2, 0, by="repo")


def test_split_cli_writes_both_sides_and_never_overwrites(tmp_path, capsys):
    write_records(tmp_path / "recs.jsonl", RECORDS)
    args = ["split", str(tmp_path / "recs.jsonl"), "--out-train", str(tmp_path / "train.jsonl"), "--out-heldout",
            str(tmp_path / "heldout.array_record"), "--heldout-fraction", "0.3", "--seed", "4"]
    assert data_main(args) == 0
    train = list(read_records(tmp_path / "train.jsonl"))
    heldout = list(read_records(tmp_path / "heldout.array_record"))
    expect = split_records(RECORDS, 0.3, 4)
    assert (train, heldout) == expect
    printed = capsys.readouterr().out
    assert f"split 40 records by instance (seed 4, held-out fraction 0.3): {len(train)} train" in printed
    before = (tmp_path / "train.jsonl").read_text()
    assert data_main(args) == 2  # one line, nothing overwritten
    assert "error: --out-train " in capsys.readouterr().err and (tmp_path / "train.jsonl").read_text() == before
    bad = ["split", str(tmp_path / "recs.jsonl"), "--out-train", str(tmp_path / "a.json"), "--out-heldout",
           str(tmp_path / "b.jsonl"), "--heldout-fraction", "0.3"]
    assert data_main(bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out-train" in err and "not a record file name" in err
    assert not (tmp_path / "b.jsonl").exists()
