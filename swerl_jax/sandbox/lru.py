"""Host caches of folders kept under a byte bound, least recently used first out.

Two caches grow with every instance a run touches: the history-free stores (`checkouts`, one per base commit) and
the dependency environments (`tasks.environments`, one per instance date under an index cut-off). A Lite run left
14 GB of the first and 9.6 GB of the second, and the first filled this machine's disk. Both keep the same layout:
a cached folder `D` has a sibling lock file `D.lock`, whose mtime is D's last use (a user touches it), and
`D.bytes`, D's allocated size written once when D was made. A folder is removed only under its lock, taken
exclusively and without waiting: a user that holds the lock (a build, a copy) keeps its folder.
"""

from __future__ import annotations

import fcntl
import pathlib
import shutil
import uuid
from collections.abc import Callable, Iterable

from swerl_jax.sandbox.workdirs import tree_usage

_MAX_ENTRIES = 1 << 24  # a size walk stops here: no cached folder comes near it (sympy's env: ~40k entries)


def lock_path(folder: pathlib.Path) -> pathlib.Path:
    """The lock file beside `folder`; its mtime is the folder's last use."""
    return folder.with_name(folder.name + ".lock")


def remember_size(folder: pathlib.Path) -> int:
    """Measure `folder` (allocated bytes) and keep the figure beside it, so an eviction scan never walks it."""
    size = tree_usage(folder, _MAX_ENTRIES)[0]
    folder.with_name(folder.name + ".bytes").write_text(str(size))
    return size


def folder_bytes(folder: pathlib.Path) -> int:
    """The size `remember_size` kept, else (a folder from before sizes were kept) a walk of it, then kept."""
    try:
        return int(folder.with_name(folder.name + ".bytes").read_text())
    except (OSError, ValueError):
        return remember_size(folder)  # walked once, then kept


def evict_least_recent(folders: Iterable[pathlib.Path], cache_bytes: int, keep: pathlib.Path,
                       in_use: Callable[[pathlib.Path], bool] = lambda folder: False,
                       siblings: tuple[str, ...] = ()) -> list[pathlib.Path]:
    """Remove cached `folders`, least recently used first, until those left fit in `cache_bytes`; return them.

    Never `keep` (the folder just made: a bound smaller than one folder still serves the run), a folder whose
    lock another user holds, or one `in_use` says a user still needs (checked under its lock, where no new user
    can start). A removed folder leaves its name at once (renamed, then deleted) with its `.bytes` and
    `siblings` (suffixes of files or folders: ".log")."""
    found = []
    for folder in folders:
        lock = lock_path(folder)
        if folder.is_dir() and lock.exists():
            found.append((lock.stat().st_mtime, str(folder), folder, folder_bytes(folder)))
    total = sum(size for *_, size in found)
    removed = []
    for _, _, folder, size in sorted(found):
        if total <= cache_bytes:
            break
        if folder == keep:
            continue
        with open(lock_path(folder), "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # being built or copied now: it stays
                continue
            if folder.is_dir() and in_use(folder):
                continue
            if folder.is_dir():
                trash = folder.with_name(f".{folder.name}.evicted.{uuid.uuid4().hex[:8]}")
                folder.rename(trash)  # gone from its name at once, then deleted
                shutil.rmtree(trash, ignore_errors=True)
                removed.append(folder)
            for suffix in (".bytes", *siblings):
                sibling = folder.with_name(folder.name + suffix)
                if sibling.is_dir() and not sibling.is_symlink():
                    shutil.rmtree(sibling, ignore_errors=True)
                else:
                    sibling.unlink(missing_ok=True)
            total -= size
    return removed


def remove_abandoned(partial: pathlib.Path, folder: pathlib.Path) -> bool:
    """Remove `partial`, a half-made copy of `folder` that a killed process left, unless a build of `folder` runs
    now (it holds the lock). Returns whether it was removed."""
    with open(lock_path(folder), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(partial, ignore_errors=True)
        return True


def remove_trash(parent: pathlib.Path) -> None:
    """Delete what an eviction renamed away and a killed process did not finish deleting (`.NAME.evicted.*`)."""
    for trash in parent.glob(".*.evicted.*"):
        shutil.rmtree(trash, ignore_errors=True)
