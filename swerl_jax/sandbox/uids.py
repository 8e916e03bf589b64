"""Unprivileged uids for sandboxes, one per running sandbox across every process of the host.

A sandbox's uid is what makes RLIMIT_NPROC a per-sandbox bound (the kernel counts processes per real uid), so two
sandboxes must never share one, whichever processes started them. Each uid is reserved by an exclusive `flock` on
its own lock file in a root-only folder that no sandbox sees (it is not in the sandbox's view, and the lock's owner
is the host process, not the command); the kernel drops the lock when the holder exits, however it exits, so a
crashed harness leaves nothing reserved.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import stat
from collections.abc import Iterator
from contextlib import contextmanager

UID_BASE = 2_900_000
UID_COUNT = 1 << 20  # the block the sandboxes draw from: far more than any host runs at once
LOCK_DIR = pathlib.Path("/run/swerl-sandbox-uids")


def _lock_dir() -> int:
    """An fd of the lock folder, made root-only if new; a folder someone else owns (or a link) is refused."""
    try:
        LOCK_DIR.mkdir(mode=0o700)
    except FileExistsError:
        pass
    fd = os.open(LOCK_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    info = os.fstat(fd)
    if info.st_uid != 0 or stat.S_IMODE(info.st_mode) & 0o077:
        os.close(fd)
        raise PermissionError(f"{LOCK_DIR} must be root's and private (0700) to reserve sandbox uids")
    return fd


@contextmanager
def reserve_uid() -> Iterator[int | None]:
    """A uid no other sandbox of this host holds while the context lasts, when running as root; else None (the
    command keeps the host's uid). The search starts at a pid-dependent place so that concurrent processes rarely
    try the same locks."""
    if os.geteuid() != 0:
        yield None
        return
    folder = _lock_dir()
    try:
        start = (os.getpid() * 256) % UID_COUNT
        for step in range(UID_COUNT):
            uid = UID_BASE + (start + step) % UID_COUNT
            fd = os.open(str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
            try:
                # per open file description: a second sandbox of this very process is refused too
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield uid
            finally:
                os.close(fd)  # drops the lock; the empty file stays for the next sandbox
            return
        raise RuntimeError(f"all {UID_COUNT} sandbox uids are in use")
    finally:
        os.close(folder)
