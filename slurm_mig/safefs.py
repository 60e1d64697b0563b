"""Directories and files that only root (the process's user) may write or read.

The hooks and the planner keep state where a job's user must not reach it: a lock a
user could hold, records naming other jobs' MIG devices, the runtime store. These
helpers create such paths with a fixed mode whatever the umask, refuse one that is not
what it should be (a symlink, another owner: someone put it there) and repair a mode
that is too open. Standard library only: the hooks import this.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path


def grant_user(fd: int, uid: int, perm: int) -> None:
    """Give user ``uid`` ``perm`` (4 read, 2 write) on the open file ``fd`` by a POSIX ACL
    entry, the owner keeping its own bits and the group and others nothing; the file
    stays its owner's, so that user can neither change its mode nor (without read and
    write) hard-link it. OSError (EOPNOTSUPP where the file system has no ACLs)."""
    owner = (os.fstat(fd).st_mode >> 6) & 7
    undefined = 0xFFFFFFFF
    entries = (
        (0x01, owner, undefined),  # ACL_USER_OBJ
        (0x02, perm, uid),  # ACL_USER
        (0x04, 0, undefined),  # ACL_GROUP_OBJ
        (0x10, perm, undefined),  # ACL_MASK
        (0x20, 0, undefined),  # ACL_OTHER
    )
    value = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    os.setxattr(fd, "system.posix_acl_access", value)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` at once (a temporary file beside it, renamed), with
    ``mode`` whatever the umask; a reader sees the old file or the new, never a part.
    OSError on failure, the temporary file removed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(fd, mode)
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


class UnsafePathError(OSError):
    """A path that must be root's is not: the message names it, its owner and the fix."""


def secure_dir(path: Path, mode: int) -> str | None:
    """Create ``path`` (and missing parents, 0755) with ``mode``, or check an existing
    one: UnsafePathError if it is not a directory or not owned by this process's user;
    its mode set to ``mode`` when it differs. Returns what was repaired, or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _make_parents(path.parent)
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            pass
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(
            f"{path} is not a directory (a symlink or a file put there?); remove it"
        )
    return _own_and_mode(path, st, mode)


def check_file(path: Path, fd: int, mode: int) -> str | None:
    """Check an open file as `secure_dir` checks a directory (regular file, our own,
    ``mode`` enforced through ``fd``); what was repaired, or None."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{path} is not a regular file; remove it")
    return _own_and_mode(path, st, mode, fd)


def _own_and_mode(path: Path, st: os.stat_result, mode: int, fd: int | None = None) -> str | None:
    if st.st_uid != os.geteuid():
        raise UnsafePathError(
            f"{path} is owned by uid {st.st_uid}, not {_who()}; someone else made it: "
            "remove it (it is recreated)"
        )
    have = stat.S_IMODE(st.st_mode)
    if have == mode:
        return None
    if fd is None:
        os.chmod(path, mode)
    else:
        os.fchmod(fd, mode)
    return f"{path} had mode {have:04o}; set it to {mode:04o}"


def _make_parents(path: Path) -> None:
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:
            continue
        os.chmod(d, 0o755)  # whatever the umask


def _who() -> str:
    return "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (this process)"


def make_private(path: Path) -> None:
    """Mode 0600 on a file this process owns (a database and the files SQLite makes
    beside it with the same mode); nothing when it is another's or missing."""
    try:
        if path.stat().st_uid == os.geteuid():
            os.chmod(path, 0o600)
    except OSError:
        pass
