"""Per-file manifests: written atomically, every kind of damage named by file."""

import pytest

from swerl_jax.runs.integrity import MANIFEST, CorruptCheckpointError, has_manifest, verify_manifest, write_manifest


def _tree(root):
    (root / "a").mkdir(parents=True)
    (root / "a" / "data").write_bytes(bytes(range(256)) * 64)
    (root / "meta.json").write_text('{"x": 1}')


def test_round_trip_and_each_kind_of_damage(tmp_path):
    _tree(tmp_path)
    manifest = write_manifest(tmp_path)
    assert sorted(manifest["files"]) == ["a/data", "meta.json"] and has_manifest(tmp_path)
    assert not list(tmp_path.glob(f".{MANIFEST}*"))  # no temp file left
    verify_manifest(tmp_path)
    (tmp_path / "extra").write_text("added later")  # files not in the manifest are not Orbax's: ignored
    verify_manifest(tmp_path)

    (tmp_path / "meta.json").write_text('{"x": 2}')
    with pytest.raises(CorruptCheckpointError, match=r"meta.json: CRC-32 .* expected"):
        verify_manifest(tmp_path)
    (tmp_path / "meta.json").write_text('{"x": 1}')
    (tmp_path / "a" / "data").write_bytes(b"short")
    with pytest.raises(CorruptCheckpointError, match=r"a/data: 5 bytes, expected 16384 \(truncated\?\)"):
        verify_manifest(tmp_path)
    (tmp_path / "a" / "data").unlink()
    with pytest.raises(CorruptCheckpointError, match="a/data: listed in the manifest but missing"):
        verify_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text('{"files": ')
    with pytest.raises(CorruptCheckpointError, match=f"{MANIFEST}: unreadable manifest"):
        verify_manifest(tmp_path)
    (tmp_path / MANIFEST).unlink()
    with pytest.raises(FileNotFoundError, match="no integrity manifest"):
        verify_manifest(tmp_path)
