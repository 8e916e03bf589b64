"""Atomic sharded outputs: JSONL and ArrayRecord shards staged in a hidden folder, published on success.

Each shard is written to ``<staging>/.<name>.tmp`` and renamed to ``<staging>/<name>`` when complete;
``publish`` moves a finished run's shards into ``<out>/<dataset>/`` (renames within one file system are atomic)
only after the whole pipeline succeeded. A failed run leaves at most a hidden staging folder (removed by
the command) and never a half-written file where a loader looks (``<out>/<dataset>/*.jsonl``).
ArrayRecord shards hold one UTF-8 JSON object per record (the same bytes as a JSONL line, without newline).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from collections.abc import Iterable
from pathlib import Path

from swerl_jax.data.records import write_records

EXTENSIONS = {"jsonl": "jsonl", "array_record": "array_record"}
VALIDATED = ("records", "rl_seeds")  # datasets of PR records (meta/ and dropped/ are side tables)


def shard_index(key: str, num_shards: int) -> int:
    """Stable shard of a record id (crc32, identical in every worker process and run)."""
    return zlib.crc32(key.encode()) % num_shards


def shard_name(dataset: str, index: int, num_shards: int, fmt: str) -> str:
    """``records-00001-of-00004.jsonl``."""
    return f"{dataset}-{index:05d}-of-{num_shards:05d}.{EXTENSIONS[fmt]}"


def write_shard(
    staging_dir: str, dataset: str, index: int, num_shards: int, records: Iterable[dict], formats: Iterable[str]
) -> list[str]:
    """Write one shard in every format (records sorted by instance_id), each via temp file + rename."""
    rows = sorted(records, key=lambda r: r["instance_id"])
    out_dir = Path(staging_dir) / dataset
    written = []
    for fmt in formats:
        final = out_dir / shard_name(dataset, index, num_shards, fmt)
        # records.write_records: the loaders' own format, temp file + fsync + rename; PR records are validated.
        write_records(final, rows, validate=dataset in VALIDATED)
        written.append(str(final))
    return written


def publish(staging_dir: str, out_dir: str, dataset: str, num_shards: int, formats: Iterable[str]) -> list[str]:
    """Move a finished dataset from staging into ``out_dir/dataset`` (empty shards filled in, stale shards of a
    previous run removed) and write its ``_MANIFEST.json``. Returns the published shard paths."""
    src, dst = Path(staging_dir) / dataset, Path(out_dir) / dataset
    dst.mkdir(parents=True, exist_ok=True)
    names = set()
    for fmt in formats:
        for i in range(num_shards):
            name = shard_name(dataset, i, num_shards, fmt)
            if not (src / name).exists():  # no record hashed to this shard: publish an empty one
                write_shard(staging_dir, dataset, i, num_shards, [], [fmt])
            names.add(name)
    for old in dst.iterdir():
        if old.name.startswith(f"{dataset}-") and old.name not in names:
            old.unlink()
    for name in sorted(names):
        os.replace(src / name, dst / name)
    manifest = {"dataset": dataset, "num_shards": num_shards, "shards": sorted(names)}
    tmp = dst / "._MANIFEST.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, dst / "_MANIFEST.json")
    return [str(dst / n) for n in sorted(names)]


def remove_staging(staging_dir: str) -> None:
    """Delete a run's staging folder (after publishing, or after a failure)."""
    shutil.rmtree(staging_dir, ignore_errors=True)
