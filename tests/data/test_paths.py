"""Records paths: files, directories, globs, comma lists; relative paths from the repository root."""

import pytest

from swerl_jax.data import paths
from swerl_jax.data.paths import expand_record_paths


def _touch(folder, *names):
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        (folder / n).write_text("{}\n")
    return folder


def test_files_directories_and_globs(tmp_path):
    shards = _touch(tmp_path / "out" / "rl_seeds", "rl_seeds-00000-of-00002.jsonl", "rl_seeds-00001-of-00002.jsonl",
                    "rl_seeds-00000-of-00002.array_record", "rl_seeds-00001-of-00002.array_record", "README.txt")
    ar = [str(shards / f"rl_seeds-0000{i}-of-00002.array_record") for i in range(2)]
    js = [str(shards / f"rl_seeds-0000{i}-of-00002.jsonl") for i in range(2)]
    assert expand_record_paths(str(shards)) == ar  # curation writes both kinds: the random-access one is read
    assert expand_record_paths(f"{shards}/*.jsonl") == js
    assert expand_record_paths(f"{shards}/rl_seeds-*") == sorted(ar + js)
    assert expand_record_paths(f" {js[1]} ,{js[0]},{js[1]}") == [js[1], js[0]]  # order kept, repeats dropped
    assert expand_record_paths([js[0]]) == [js[0]]
    _touch(tmp_path / "only_jsonl", "a.jsonl")
    assert expand_record_paths(str(tmp_path / "only_jsonl")) == [str(tmp_path / "only_jsonl" / "a.jsonl")]


def test_errors_name_the_key_and_the_entry(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data.train_files: '.*nope-\*.array_record' matches no records"):
        expand_record_paths(f"{tmp_path}/nope-*.array_record")
    _touch(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="directory .*empty holds no"):
        expand_record_paths(str(tmp_path / "empty"), key="records")
    _touch(tmp_path, "notes.txt")
    with pytest.raises(ValueError, match="notes.txt is not a records file"):
        expand_record_paths(str(tmp_path / "notes.txt"))


def test_relative_paths_fall_back_to_the_repository_root(tmp_path, monkeypatch):
    repo = _touch(tmp_path / "repo" / "data", "recs.jsonl").parent
    monkeypatch.setattr(paths, "REPO_ROOT", repo)
    monkeypatch.chdir(_touch(tmp_path / "elsewhere"))
    assert expand_record_paths("data/recs.jsonl") == [str(repo / "data" / "recs.jsonl")]
    _touch(tmp_path / "elsewhere" / "data", "recs.jsonl")  # the current directory wins when it has the file
    assert expand_record_paths("data/recs.jsonl") == ["data/recs.jsonl"]


def test_a_records_flag_made_absolute_names_what_expand_finds(tmp_path, monkeypatch):
    """Held-out check of issue 46, item 1: each entry of a records flag, absolute where it is found (the current
    directory, else the repository root), so recorded settings name files; a missing one is the current
    directory's."""
    _touch(tmp_path / "d", "a-0.jsonl", "a-1.jsonl")
    monkeypatch.chdir(tmp_path)
    spec = paths.user_record_spec("d/a-*.jsonl, d ,missing.jsonl,tests/data/test_paths.py")
    assert spec.split(",") == [str(tmp_path / "d" / "a-*.jsonl"), str(tmp_path / "d"), str(tmp_path / "missing.jsonl"),
                               str(paths.REPO_ROOT / "tests" / "data" / "test_paths.py")]
    assert expand_record_paths(spec.split(",")[:2]) == [str(tmp_path / "d" / f"a-{i}.jsonl") for i in range(2)]
