"""The sandbox's seccomp filter: system calls no repository's tests need, refused with an error (never a kill).

Built with libseccomp (through `pyseccomp`, ctypes over the Debian package libseccomp2), exported as classic BPF
and handed to bubblewrap (`--seccomp FD`), which loads it as the last step before running the command, so it binds
everything in the sandbox. The default is to allow: the filter is a short deny list of kernel attack surface and of
the calls that would pass the sandbox's bounds (SECURITY.md):

- `fallocate` reserves any amount of disk in one call, faster than the quota's poll: refused with EOPNOTSUPP, the
  answer of a file system without it, so glibc's `posix_fallocate` falls back to writing (bounded by RLIMIT_FSIZE).
- `memfd_create` and `shmget` (only where no cgroup bounds the sandbox's memory): memfd pages and SysV shared
  memory segments count against no process's RLIMIT_AS, so one process could hold any amount of host memory in them
  (a held-out red team held 512 MiB in four detached segments under a 256 MiB limit).
- new user namespaces (`unshare`/`clone` with CLONE_NEWUSER; `setns`): inside one the command is root over its
  own namespaces, kernel surface no test needs. `clone3` passes its flags in memory a filter cannot read, so it is
  refused with ENOSYS, which makes glibc (and so fork, threads, `unshare`) fall back to `clone`.
- mounts, kernel keyrings, BPF, perf events, userfaultfd, io_uring, module loading, kexec, and the other calls of
  Docker's default deny list that no test suite uses.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

# Refused with EPERM: calls a test suite never needs and that widen the kernel attack surface.
_REFUSED = (
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "lookup_dcookie",
    "open_by_handle_at", "name_to_handle_at", "syslog", "fanotify_init", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "iopl", "ioperm", "vhangup", "nfsservctl", "process_vm_writev",
)
_CLONE_NEWUSER = 0x10000000


class SeccompUnavailable(RuntimeError):
    """libseccomp or its Python binding is missing (`make install-dev` installs both)."""


@functools.cache
def filter_bpf(refuse_memfd: bool) -> bytes:
    """The filter as BPF bytes for bubblewrap's `--seccomp` (cached: it is the same for every sandbox of a
    process). `refuse_memfd`: also refuse `memfd_create` (no cgroup bounds the sandbox's memory)."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError) as err:  # RuntimeError: the binding found no libseccomp.so.2
        raise SeccompUnavailable(f"the sandbox's seccomp filter needs pyseccomp and libseccomp2: {err}") from None
    filt = sc.SyscallFilter(sc.ALLOW)
    # The same rules for the 32-bit ABIs of this machine: otherwise `int 0x80` would be a way around them.
    if sc.system_arch() == sc.Arch.X86_64:
        for arch in (sc.Arch.X86, sc.Arch.X32):
            filt.add_arch(arch)
    for name in _REFUSED:
        _deny(sc, filt, name, sc.ERRNO(errno.EPERM))
    _deny(sc, filt, "fallocate", sc.ERRNO(errno.EOPNOTSUPP))
    if refuse_memfd:  # memory held by no process: memfd pages and SysV shared memory segments
        for name in ("memfd_create", "shmget"):  # libseccomp also matches i386's multiplexed ipc(SHMGET)
            _deny(sc, filt, name, sc.ERRNO(errno.EPERM))
    for call in ("unshare", "clone"):  # only with CLONE_NEWUSER: plain clone is fork and threads
        _deny(sc, filt, call, sc.ERRNO(errno.EPERM), sc.Arg(0, sc.MASKED_EQ, _CLONE_NEWUSER, _CLONE_NEWUSER))
    _deny(sc, filt, "clone3", sc.ERRNO(errno.ENOSYS))
    with tempfile.TemporaryFile() as out:
        filt.export_bpf(out)
        out.flush()
        out.seek(0)
        return out.read()


def _deny(sc, filt, name: str, action: int, *args) -> None:  # noqa: ANN001 (the binding's types are untyped)
    """Add one rule; a call this kernel's architecture does not have (e.g. `clone` argument order, `iopl` off
    x86) is skipped, since it cannot be made."""
    try:
        filt.add_rule(action, name, *args)
    except (OSError, ValueError):
        pass


def fd_of(bpf: bytes) -> int:
    """A readable fd holding `bpf` (a pipe: bubblewrap reads it to the end), for `pass_fds`. The caller closes it."""
    read, write = os.pipe()
    try:
        os.write(write, bpf)  # a filter is a few hundred bytes: far below a pipe's buffer, so this never blocks
    finally:
        os.close(write)
    return read
