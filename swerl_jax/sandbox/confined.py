"""File I/O beneath a directory the model can write: no symbolic link is followed, no `..` leaves it.

The agent's editor runs on the host, over a checkout whose every entry the model may have replaced from a bash
step: by a link to a host file, a FIFO, a link loop, a 400 MB file. So a path is never handed to the kernel whole.
It is walked one component at a time from a directory fd, each opened with O_NOFOLLOW, starting at an anchor the
model cannot replace (the episode's work dir, whose parent is the host's): a link anywhere on the way is an error,
never followed. Only regular files are read or written (O_NONBLOCK, so a FIFO cannot block the host), and reads
are bounded. Every failure is a `ConfinedError` whose message is for the model.
"""

from __future__ import annotations

import errno
import os
import pathlib
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A path is walked (and for a write, made) one folder per component on the host, between the quota's polls: a turn of
# 1 MiB of "a/a/..." made 500,000 nested folders in one call. No real checkout is near these bounds, the kernel
# refuses longer paths (PATH_MAX), and the quota's walk (sandbox.workdirs.MAX_WALK_DEPTH, 256) counts deeper trees as
# over the quota.
MAX_PATH_CHARS = 4096
MAX_PATH_PARTS = 128


class ConfinedError(ValueError):
    """A path or file the editor will not touch; the message says why, for the model."""


class Missing(ConfinedError):
    """A directory on the way does not exist."""


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _reason(err: OSError, link: bool = False) -> str:
    if err.errno == errno.ELOOP or link:
        return "is a symbolic link (the editor follows no links; use execute_bash)"
    if err.errno == errno.ENOTDIR:
        return "is not a directory (or a link to one)"
    if err.errno == errno.ENOENT:
        return "no such file or directory"
    return err.strerror or type(err).__name__


def _so_far(parts: Sequence[str], count: int) -> str:
    # formatted only for a message: formatting the path so far at every component was quadratic in the depth
    return "/".join(parts[:max(0, count)]) or "."


def split(path: str, root: pathlib.PurePath) -> tuple[str, ...]:
    """`path` (relative to `root`, or absolute inside it) as its components; ConfinedError when it leaves it."""
    if "\0" in path:
        raise ConfinedError(f"{path!r}: a path cannot hold a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise ConfinedError(f"{path[:100]}...: the path is {len(path)} characters long; the limit is {MAX_PATH_CHARS}")
    pure = pathlib.PurePosixPath(path)
    if pure.is_absolute():
        if not pure.is_relative_to(root):
            raise ConfinedError(f"{path}: outside the repository ({root})")
        pure = pure.relative_to(root)
    parts = tuple(p for p in pure.parts if p not in ("", "."))
    if ".." in parts:
        raise ConfinedError(f"{path}: '..' is not allowed in a path (outside the repository ({root}))")
    if len(parts) > MAX_PATH_PARTS:
        raise ConfinedError(f"{path[:100]}...: the path is {len(parts)} folders deep; the limit is {MAX_PATH_PARTS}")
    return parts


class Confined:
    """The files under `anchor / prefix`, reached from `anchor` without following links.

    anchor: a directory the model cannot rename or replace (its parent is not writable from the sandbox).
    prefix: the components from it to the root the paths are relative to (the checkout inside the work dir).
    """

    def __init__(self, anchor: pathlib.Path, prefix: Sequence[str] = ()):
        self.anchor, self.prefix = pathlib.Path(anchor), tuple(prefix)

    @contextmanager
    def _dir(self, parts: Sequence[str], create: bool = False) -> Iterator[int]:
        """An fd of the directory `parts` (made when `create`), every component opened with O_NOFOLLOW."""
        fd = os.open(self.anchor, _DIR_FLAGS)
        try:
            for i, name in enumerate(self.prefix + tuple(parts)):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise Missing(f"{_so_far(parts, i + 1 - len(self.prefix))}: no such directory") from None
                    os.mkdir(name, 0o755, dir_fd=fd)
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as err:
                    shown = _so_far(parts, i + 1 - len(self.prefix))
                    raise ConfinedError(f"{shown}: {_reason(err, _is_link(name, fd))}") from None
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def kind(self, parts: Sequence[str]) -> str | None:
        """'dir', 'file', 'link' or 'other' for the entry `parts` (the link itself, not its target); None if absent."""
        if not parts:
            return "dir"
        try:
            with self._dir(parts[:-1]) as fd:
                mode = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode
        except (Missing, FileNotFoundError):
            return None
        except OSError as err:
            raise ConfinedError(f"{'/'.join(parts)}: {_reason(err)}") from None
        if stat.S_ISDIR(mode):
            return "dir"
        if stat.S_ISREG(mode):
            return "file"
        return "link" if stat.S_ISLNK(mode) else "other"

    def listdir(self, parts: Sequence[str], limit: int) -> tuple[list[tuple[str, bool]], bool]:
        """([(name, is a directory)], whether more than `limit` entries were left out) of the directory `parts`."""
        with self._dir(parts) as fd:
            entries, more = [], False
            with os.scandir(fd) as scan:
                for entry in scan:
                    if len(entries) >= limit:
                        more = True
                        break
                    entries.append((entry.name, entry.is_dir(follow_symlinks=False)))
        return entries, more

    def _open_file(self, parts: Sequence[str], flags: int, create_dirs: bool = False) -> int:
        if not parts:
            raise ConfinedError(". is a directory")
        with self._dir(parts[:-1], create=create_dirs) as dfd:
            try:
                fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            except OSError as err:
                raise ConfinedError(f"{'/'.join(parts)}: {_reason(err)}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfinedError(f"{'/'.join(parts)}: not a regular file")
        return fd

    def read(self, parts: Sequence[str], limit: int) -> bytes:
        """The regular file `parts`, at most `limit` bytes (ConfinedError for a larger one: nothing is held)."""
        fd = self._open_file(parts, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise ConfinedError(f"{'/'.join(parts)}: {size} bytes, over the editor's limit of {limit} "
                                    "(use execute_bash: head, sed -n, grep)")
            chunks, total = [], 0
            while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
                chunks.append(chunk)
                total += len(chunk)
                if total > limit:
                    raise ConfinedError(f"{'/'.join(parts)}: over the editor's limit of {limit} bytes")
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write(self, parts: Sequence[str], data: bytes) -> None:
        """Write the regular file `parts` (created with its parent directories when absent)."""
        fd = self._open_file(parts, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_dirs=True)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def unlink(self, parts: Sequence[str]) -> None:
        """Remove the file (or link) `parts`, never what a link points to."""
        with self._dir(parts[:-1]) as fd:
            try:
                os.unlink(parts[-1], dir_fd=fd)
            except OSError as err:
                raise ConfinedError(f"{'/'.join(parts)}: {_reason(err)}") from None
