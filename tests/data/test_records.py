"""Record schema, validation messages, JSONL/ArrayRecord round trips, streaming past bad records."""

import copy
import json

import pytest

from swerl_jax.data.records import (
    REQUIRED_FIELDS,
    ErrorCounter,
    RecordError,
    read_records,
    validate_record,
    write_records,
)
from swerl_jax.data.synthetic import synthetic_records


def test_real_records_load_and_validate(shared_data):
    errors = []
    records = list(read_records(shared_data / "pr_records_requests_flask.jsonl", on_error=errors.append))
    assert len(records) == 17 and errors == []
    assert {r["repo"] for r in records} == {"psf/requests", "pallets/flask"}
    for r in records:
        assert set(REQUIRED_FIELDS) <= set(r)


def _bad_records() -> dict[str, tuple[dict | str, str]]:
    """One broken entry per kind of error: (entry, expected message fragment)."""
    good = synthetic_records(1, seed=3)[0]
    path = next(iter(good["code_context"]))

    def edit(fn):
        r = copy.deepcopy(good)
        r["instance_id"] = f"bad-{len(cases)}"
        fn(r)
        return r

    cases: dict[str, tuple] = {}
    cases["missing"] = (edit(lambda r: r.pop("base_commit")), "field 'base_commit': missing field")
    cases["type"] = (edit(lambda r: r.update(code_context=[path])), "field 'code_context': wrong type: list")
    cases["empty_ps"] = (edit(lambda r: r.update(problem_statement="  \n")), "empty problem statement")
    cases["same"] = (edit(lambda r: r.update(oracle_new_content=dict(r["code_context"]))),
                     "oracle identical to code_context")
    cases["abs"] = (edit(lambda r: r.update(code_context={"/etc/passwd": "x"})), "unsafe path (absolute)")
    cases["dotdot"] = (edit(lambda r: r.update(oracle_new_content={"a/../../x.py": "y"})), "'..'")
    cases["backslash"] = (edit(lambda r: r.update(code_context={"a\\b.py": "x"})), "unsafe path (backslash)")
    cases["surrogate"] = (edit(lambda r: r.update(problem_statement="bad \udcff text")), "not valid UTF-8")
    cases["json"] = ('{"instance_id": "broken", ', "malformed JSON")
    return cases


def test_each_bad_record_gives_its_message():
    for name, (entry, fragment) in _bad_records().items():
        if isinstance(entry, str):
            continue
        with pytest.raises(RecordError) as e:
            validate_record(entry, where="test")
        assert fragment in str(e.value), (name, str(e.value))
        assert entry["instance_id"] in str(e.value)
    with pytest.raises(RecordError, match="not valid UTF-8"):
        validate_record({**synthetic_records(1)[0], "repo": b"bytes"})


def test_broken_file_reports_each_error_and_streams_good_ones(tmp_path):
    good = synthetic_records(3, seed=1)
    cases = _bad_records()
    path = tmp_path / "mixed.jsonl"
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(json.dumps(good[0]) + "\n")
        for entry, _ in cases.values():
            # json.dumps escapes the lone surrogate as \udcff, which json.loads turns back into one.
            f.write((entry if isinstance(entry, str) else json.dumps(entry)) + "\n")
        f.write("\n" + json.dumps(good[1]) + "\n")
    with open(path, "ab") as f:
        f.write(b'{"instance_id": "latin1", "repo": "caf\xe9"}\n' + json.dumps(good[2]).encode() + b"\n")
    errors: list[RecordError] = []
    out = list(read_records(path, on_error=errors.append))
    assert [r["instance_id"] for r in out] == [g["instance_id"] for g in good]
    messages = [str(e) for e in errors]
    for name, (_, fragment) in cases.items():
        assert any(fragment in m for m in messages), (name, messages)
    assert len(errors) == len(cases) + 1 and "not valid UTF-8 (byte" in messages[-1]
    assert any("mixed.jsonl:" in m for m in messages)  # the location is named
    counter = ErrorCounter()
    assert len(list(read_records(path, on_error=counter))) == 3 and counter.total == len(cases) + 1


@pytest.mark.parametrize("suffix", [".jsonl", ".arrayrecord", ".array_record"])
def test_write_read_round_trip(tmp_path, suffix):
    records = synthetic_records(5, seed=2)
    records[0]["relevant_files"] = []
    path = tmp_path / f"r{suffix}"
    assert write_records(path, records) == 5
    assert list(read_records(path)) == records
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left


def test_write_is_atomic_on_bad_record(tmp_path):
    records = synthetic_records(3)
    path = tmp_path / "r.jsonl"
    write_records(path, records[:1])
    bad = dict(records[2], problem_statement="")
    with pytest.raises(RecordError, match="empty problem statement"):
        write_records(path, [records[1], bad])
    assert list(read_records(path)) == records[:1]  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unknown record file type"):
        list(read_records(tmp_path / "x.csv"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(read_records(tmp_path / "x.jsonl"))


def test_relevant_files_must_be_in_context():
    r = synthetic_records(1)[0]
    with pytest.raises(RecordError, match="relevant_files.*not in code_context"):
        validate_record({**r, "relevant_files": ["other.py"]})
    with pytest.raises(RecordError, match="relevant_files.*modified by the oracle"):
        validate_record({**r, "relevant_files": list(r["code_context"])})


def test_validate_survives_hostile_lines_and_flags_duplicates(tmp_path, capsys):
    """Lines that used to abort `validate` (a 5000-digit integer, 100k-deep nesting) are one invalid record
    each, with their line number; a BOM before the first line is accepted; a repeated instance_id is invalid."""
    from swerl_jax.data.__main__ import main

    good = synthetic_records(4, seed=5)
    lines = [
        "\ufeff" + json.dumps(good[0]),                                          # 1: BOM, valid
        '{"instance_id": "big", "n": ' + "7" * 5000 + "}",                       # 2: huge integer
        json.dumps(good[1]),                                                     # 3
        "[" * 100_000 + "]" * 100_000,                                           # 4: deep nesting
        json.dumps(good[2]),                                                     # 5
        json.dumps(dict(good[3], instance_id=good[1]["instance_id"])),           # 6: duplicate of line 3
        '{"instance_id": "ctl", "repo": "a\x01b"}',                              # 7: control character
    ]
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    errors: list[RecordError] = []
    out = list(read_records(path, on_error=errors.append))
    assert [r["instance_id"] for r in out] == [g["instance_id"] for g in good[:3]]
    messages = [str(e) for e in errors]
    assert len(messages) == 4, messages
    assert f"{path}:2" in messages[0] and "4300 digits" in messages[0]
    assert f"{path}:4" in messages[1] and "nested too deeply" in messages[1]
    assert f"{path}:6" in messages[2] and f"duplicate: first seen at {path}:3" in messages[2]
    assert good[1]["instance_id"] in messages[2]
    assert f"{path}:7" in messages[3] and " at at " not in messages[3] and "control character at column" in messages[3]

    assert main(["validate", str(path)]) == 1
    printed = capsys.readouterr().out
    assert f"{path}: 3 valid, 4 invalid" in printed
    for lineno in (2, 4, 6, 7):
        assert f"{path}:{lineno}" in printed


def test_cli_takes_directories_globs_and_finds_duplicates_across_shards(tmp_path, capsys):
    from swerl_jax.data.__main__ import main as data_main
    from swerl_jax.data.synthetic import synthetic_records

    recs = synthetic_records(3, seed=5)
    shards = tmp_path / "rl_seeds"
    write_records(shards / "rl_seeds-00000-of-00002.jsonl", recs[:2])
    write_records(shards / "rl_seeds-00001-of-00002.jsonl", [recs[2], recs[0]])  # recs[0] again, in another shard
    assert data_main(["validate", str(shards)]) == 1
    out = capsys.readouterr().out
    assert f"{shards}: 3 valid, 1 invalid" in out and "duplicate: first seen at" in out
    assert data_main(["stats", f"{shards}/*.jsonl"]) == 0
    assert "3 valid records, 1 invalid" in capsys.readouterr().out
    assert data_main(["convert", str(shards), str(tmp_path / "all.array_record")]) == 0
    assert [r["instance_id"] for r in read_records(tmp_path / "all.array_record")] == [
        r["instance_id"] for r in (recs[0], recs[1], recs[2])]
    assert data_main(["validate", str(tmp_path / "nothing-*.jsonl")]) == 2
    assert "RECORDS: " in capsys.readouterr().err
