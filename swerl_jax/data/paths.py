"""Where PR records are: one spelling of a records path for every tool (training, validate, stats, convert).

    expand_record_paths("out/rl_seeds")                        # a directory: its record shards
    expand_record_paths("/data/swerl/rl_seeds-*.array_record")  # a glob
    expand_record_paths("a.jsonl,b.jsonl")                     # comma-separated, each any of the above

Curation writes `OUT/rl_seeds/*-0000i-of-0000N.{jsonl,array_record}`; any of these forms reads them back.
A directory holding both kinds (curation writes both by default) yields its `.array_record` shards: the random
access format the loader prefers. `.array_record` is the extension this project writes; `.arrayrecord` is still
read. A relative entry resolves from the current directory, else from the repository root, so configs that say
`../shared/data/...` work from any directory.

Every entry point makes the paths it is given absolute once, before anything uses them (a sampler process, Orbax
and a later resume all need the same folder): `user_path` for a path typed on the command line (the current
directory's), `config_path` for a path a config names (the rule above: records, SWE-bench files, model folders).
"""

from __future__ import annotations

import glob
import os
import pathlib
from collections.abc import Sequence
from typing import Any

JSONL = ".jsonl"
ARRAY_RECORD = ".array_record"
RECORD_SUFFIXES = (JSONL, ARRAY_RECORD, ".arrayrecord")
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def user_path(path: str | os.PathLike) -> str:
    """A path typed on the command line, absolute against the current directory (`~` expanded; "" stays "")."""
    text = os.fspath(path)
    return os.path.abspath(os.path.expanduser(text)) if text else text


def config_path(entry: str | os.PathLike) -> str:
    """A path a config names, absolute: from the current directory when it exists there, else from the repository
    root when it exists there (a default such as `../shared/data/swebench_lite.json`), else the current
    directory's (so an error names where it was looked for). "" stays ""."""
    text = os.path.expanduser(os.fspath(entry))
    if not text:
        return text
    for candidate in _candidates(text):
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    return os.path.abspath(text)


def user_record_spec(spec: str) -> str:
    """A records flag (comma-separated files, directories or globs) with each entry absolute where
    `expand_record_paths` finds it (the current directory, else the repository root; else the current directory's,
    for the error): settings recorded from it name files, not spellings that mean another file elsewhere."""
    out = []
    for entry in (e.strip() for e in spec.split(",")):
        if entry:
            found = [c for c in _candidates(os.path.expanduser(entry))
                     if (glob.glob(c) if glob.has_magic(c) else os.path.exists(c))]
            out.append(os.path.abspath(found[0] if found else os.path.expanduser(entry)))
    return ",".join(out)


def config_paths(config: Any, keys: Sequence[str], keep: Sequence[str] = ()) -> None:
    """Make each of `keys` in `config` (a ConfigDict or dict) a `config_path`, in place; empty values and the
    names in `keep` (values that are not paths, such as "synthetic") stay."""
    for key in keys:
        value = str(config[key] or "")
        if value and value not in keep:
            config[key] = config_path(value)


def _kind(path: str) -> str | None:
    for suffix in RECORD_SUFFIXES:
        if path.endswith(suffix):
            return JSONL if suffix == JSONL else ARRAY_RECORD
    return None


def _directory_shards(folder: pathlib.Path) -> list[str]:
    files = sorted(str(p) for p in folder.iterdir() if p.is_file() and _kind(p.name))
    array_record = [f for f in files if _kind(f) == ARRAY_RECORD]
    return array_record or files


def _candidates(entry: str) -> list[str]:
    if os.path.isabs(entry):
        return [entry]
    return [entry, str(REPO_ROOT / entry)]


def _expand_one(entry: str, key: str) -> list[str]:
    for candidate in _candidates(os.path.expanduser(entry)):
        if glob.has_magic(candidate):
            matches = sorted(m for m in glob.glob(candidate) if os.path.isfile(m) and _kind(m))
            if matches:
                return matches
        elif os.path.isdir(candidate):
            shards = _directory_shards(pathlib.Path(candidate))
            if not shards:
                raise FileNotFoundError(f"{key}: directory {candidate} holds no {'/'.join(RECORD_SUFFIXES)} files")
            return shards
        elif os.path.isfile(candidate):
            if not _kind(candidate):
                raise ValueError(f"{key}: {candidate} is not a records file (expected {', '.join(RECORD_SUFFIXES)})")
            return [candidate]
    tried = " or ".join(_candidates(entry))
    raise FileNotFoundError(f"{key}: {entry!r} matches no records file (looked for {tried})")


def expand_record_paths(spec: str | Sequence[str], key: str = "data.train_files") -> list[str]:
    """Every records file named by `spec` (comma-separated string or a list of entries: files, directories,
    globs), in a stable order without repeats. Errors name `key` and the entry that found nothing."""
    entries = [e.strip() for e in (spec.split(",") if isinstance(spec, str) else spec) if str(e).strip()]
    out: list[str] = []
    for entry in entries:
        for path in _expand_one(str(entry), key):
            if path not in out:
                out.append(path)
    return out


def blocking_file(folder: str | os.PathLike) -> pathlib.Path | None:
    """The file that stands where the folder `folder` (or one of its parents) would be made, or None: checked
    before a run starts, so a mistyped --workdir / --out is one line, not an errno from the first mkdir."""
    path = pathlib.Path(folder)
    taken = next((p for p in (path, *path.parents) if p.exists()), None)
    return taken if taken is not None and not taken.is_dir() else None
