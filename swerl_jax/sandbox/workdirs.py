"""A sandbox's work dir seen from the host: what it holds, who owns it, how it goes.

The host walks a folder that a command may be changing at that moment (a link swapped in for a folder, a tree
nested thousands deep, a folder made unreadable), so nothing here follows a link or recurses in Python.
"""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
from collections.abc import Iterator

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_WALK_DEPTH = 256  # deeper trees are not measured: they count as over the quota (one open fd per level)


def tree_usage(path: pathlib.Path, max_entries: int, chown_to: int | None = None) -> tuple[int, int]:
    """(bytes allocated, entries) under `path`; past `max_entries` (or nested past MAX_WALK_DEPTH, or holding a
    folder the host cannot read) the count is `max_entries + 1`, i.e. over any quota.

    The walk holds a directory fd per level and opens each sub-folder from its parent's fd with O_NOFOLLOW, so a
    folder a running command swaps for a link is skipped, never followed (a path-based walk would stat the host
    through it). `chown_to`: also give every entry to that uid, in the same walk. Allocated blocks, not apparent
    sizes: a 100 GB sparse file costs what it holds.
    """
    total, entries, over = 0, 0, (0, max_entries + 1)
    try:
        root = os.open(path, _DIR_FLAGS)
    except OSError:
        return 0, 0
    stack: list[tuple[int, Iterator[str]]] = []
    try:
        fd = root
        while True:
            subdirs = []
            if chown_to is not None and not stack:
                os.fchown(fd, chown_to, chown_to)
            try:
                scan = os.scandir(fd)
            except PermissionError:
                return over  # a folder the host cannot read (a non-root host): not measurable
            with scan:
                for entry in scan:
                    entries += 1
                    if entries > max_entries:
                        return over
                    try:
                        info = entry.stat(follow_symlinks=False)
                        if chown_to is not None:
                            os.chown(entry.name, chown_to, chown_to, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue  # removed while we walk
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        subdirs.append(entry.name)
            stack.append((fd, iter(subdirs)))
            fd = -1
            while stack and fd < 0:
                parent, names = stack[-1]
                name = next(names, None)
                if name is None:
                    os.close(parent)
                    stack.pop()
                    continue
                if len(stack) >= MAX_WALK_DEPTH:
                    return over
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
                except PermissionError:
                    return over
                except OSError:  # swapped for a link or a file, or removed: not followed
                    fd = -1
            if fd < 0:
                return total, entries
    finally:
        for parent, _ in stack:
            os.close(parent)
        if fd >= 0 and all(fd != parent for parent, _ in stack):
            os.close(fd)


def disk_free(path: pathlib.Path) -> int:
    """Bytes free for unprivileged users on the file system holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def remove_tree(path: str | os.PathLike) -> None:
    """Remove a directory a sandbox wrote into, at any depth and without following links: GNU rm (fts), since
    Python's rmtree recurses and raises RecursionError on a tree a command nested 1,000 folders deep."""
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if os.geteuid() != 0:  # a host that is not root cannot empty a folder the command made unreadable (chmod 000)
        subprocess.run(["chmod", "-R", "u+rwX", "--", str(path)], **quiet)  # links met inside are not followed
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], **quiet)



def sockets_under(path: pathlib.Path) -> list[pathlib.Path]:
    """The AF_UNIX socket files under `path` (itself included), links not followed. For the readable paths a
    sandbox binds: host-written folders (interpreters, cached environments) that no command can write, so a
    path-based walk is safe here; entry types come from the directory listing (no stat per file)."""
    if path.is_socket():
        return [path]
    found, folders = [], [path]
    while folders:
        try:
            scan = os.scandir(folders.pop())
        except OSError:
            continue  # unreadable to the host: the sandbox uid cannot list it either
        with scan:
            for entry in scan:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(pathlib.Path(entry.path))
                    elif not entry.is_file(follow_symlinks=False) and not entry.is_symlink() and stat.S_ISSOCK(
                            entry.stat(follow_symlinks=False).st_mode):  # only the rare non-file entries are stat'ed
                        found.append(pathlib.Path(entry.path))
                except OSError:
                    continue
    return found
