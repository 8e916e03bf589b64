"""Per-file checksums of a finalized checkpoint directory: written once after the save, verified before a restore.

A manifest ``<dir>/INTEGRITY.json`` lists every regular file under the directory (relative path, size, CRC-32)
as it landed on disk. It is written by one process after the checkpoint is complete, to a temporary name that is
fsynced and renamed, so a crash while writing it leaves either the whole manifest or none: a directory
without a manifest is "unverified" (checkpoints written before this module, or a crash between the save and
the manifest), never one that looks verified but is not.

Why per file, after the save: the checksums cover exactly the bytes a restore reads (Orbax's OCDBT data files,
metadata, JSON items), whatever process wrote them, with no change to Orbax's multi-host save path; CRC-32 is
for accidental corruption (flipped bits, truncation), not tampering. Files are read in 16 MiB blocks on a few
threads (zlib releases the GIL), so the cost is one extra sequential read of the checkpoint.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import zlib

from etils import epath

MANIFEST = "INTEGRITY.json"
_FORMAT = 1
_BLOCK = 16 << 20


class CorruptCheckpointError(ValueError):
    """A checkpoint file whose bytes differ from its manifest entry (or is missing); names the file."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(f"corrupt checkpoint file {path}: {message}")


def _checksum(path: epath.Path) -> tuple[int, int]:
    """(size, CRC-32) of one file's bytes, read in blocks."""
    crc, size = 0, 0
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            crc = zlib.crc32(block, crc)
            size += len(block)
    return size, crc


def _files(directory: epath.Path, prefix: str = "") -> list[str]:
    """Relative paths of the regular files under `directory` (recursing with iterdir: epath has no `**` glob)."""
    names = []
    for p in directory.iterdir():
        if p.is_dir():
            names += _files(p, f"{prefix}{p.name}/")
        elif p.name != MANIFEST and not p.name.startswith(f".{MANIFEST}"):
            names.append(prefix + p.name)
    return sorted(names)


def _checksums(directory: epath.Path, names: list[str], threads: int) -> dict[str, tuple[int, int]]:
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        return dict(zip(names, pool.map(lambda n: _checksum(directory / n), names)))


def write_manifest(directory: str | os.PathLike, threads: int = 4) -> dict:
    """Checksum every file under `directory` and write the manifest atomically (temp file, fsync, rename).

    Call it once the directory is final (every process's files on disk). Returns the manifest dict.
    """
    root = epath.Path(directory)
    sums = _checksums(root, _files(root), threads)
    manifest = {"format": _FORMAT, "algorithm": "crc32",
                "files": {n: {"size": s, "crc32": f"{c:08x}"} for n, (s, c) in sums.items()}}
    tmp = root / f".{MANIFEST}.tmp{os.getpid()}"
    with tmp.open("w") as f:
        json.dump(manifest, f, indent=0, sort_keys=True)
        if hasattr(f, "fileno"):
            f.flush()
            os.fsync(f.fileno())
    tmp.replace(root / MANIFEST)
    return manifest


def has_manifest(directory: str | os.PathLike) -> bool:
    """Whether `directory` carries a manifest (False: written before checksums, or the writer crashed)."""
    return (epath.Path(directory) / MANIFEST).exists()


def verify_manifest(directory: str | os.PathLike, threads: int = 4) -> None:
    """Check every file listed in `directory`'s manifest against its size and CRC-32.

    Raises:
      FileNotFoundError: there is no manifest (see `has_manifest`).
      CorruptCheckpointError: naming the first (in path order) file that is missing, truncated or changed, or
        the manifest itself when it cannot be parsed.
    """
    root = epath.Path(directory)
    path = root / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"no integrity manifest {path}")
    try:
        manifest = json.loads(path.read_text())
        entries = {str(n): (int(e["size"]), int(e["crc32"], 16)) for n, e in manifest["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptCheckpointError(os.fspath(path), f"unreadable manifest ({e})") from None
    missing = sorted(n for n in entries if not (root / n).is_file())
    if missing:
        raise CorruptCheckpointError(os.fspath(root / missing[0]), "listed in the manifest but missing")
    got = _checksums(root, sorted(entries), threads)
    for name in sorted(entries):
        (size, crc), (want_size, want_crc) = got[name], entries[name]
        if size != want_size:
            raise CorruptCheckpointError(os.fspath(root / name), f"{size} bytes, expected {want_size} (truncated?)")
        if crc != want_crc:
            raise CorruptCheckpointError(os.fspath(root / name), f"CRC-32 {crc:08x}, expected {want_crc:08x}")
