"""mig-run's memory need, from the job (its user) to the Epilog (root), through a space
the kernel bounds.

The need file is the only thing of the run directory a job may write. So that no job
can fill the run directory's file system through it (and cost another job's hooks their
state, runtime or accounting row), it lives on a file system of its own: the Prolog
(only when ``[planner] reports`` is set: nothing else reads it) mounts a tmpfs of one
page (`AREA_OPTIONS`: 4 KiB, 4 inodes, nosuid, nodev, noexec) on ``task/<job>.need/``
(root's, 0711) and makes ``need`` in it, root's, 0600, with an ACL entry
``user:<uid>:-w-``: the user can write it, up to 4 KiB, and can neither read it,
change its mode, hard-link it nor make anything beside it. The Epilog reads it as
untrusted input (`read_need`) and removes the area (lazy unmount, rmdir) in every run,
whatever ``reports`` says. A node where the hooks cannot mount (no CAP_SYS_ADMIN) makes
no need file: mig-run then says the need was not recorded, and its ``mem=`` hint in
the job's Comment still sizes the requeued run.

Standard library only: the hooks import this.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from ..safefs import grant_user
from ..slurm.reportcodec import KEY_CHARS, plain, whole_number

__all__ = [
    "AREA_OPTIONS",
    "MAX_NEED_FILE",
    "NEED_SUFFIX",
    "area_path",
    "drop_need_area",
    "make_need_file",
    "need_path",
    "read_need",
    "write_need",
]

MAX_NEED_FILE = 512  # bytes of mig-run's need file the Epilog reads
NEED_SUFFIX = ".need"  # task/<job_id>.need/: the job's need area
NEED_FILE = "need"
AREA_OPTIONS = "size=4k,nr_inodes=4,mode=0711,uid=0,gid=0"
_MS_FLAGS = 0x2 | 0x4 | 0x8  # MS_NOSUID | MS_NODEV | MS_NOEXEC
_UMOUNT_FLAGS = 0x2 | 0x8  # MNT_DETACH | UMOUNT_NOFOLLOW


def area_path(run_dir: Path, job_id: str) -> Path:
    """The job's need area: the mount point of its one-page tmpfs."""
    return Path(run_dir) / "task" / f"{job_id}{NEED_SUFFIX}"


def need_path(run_dir: Path, job_id: str) -> Path:
    """Where ``mig-run`` of the job writes its memory need (in the job's need area)."""
    return area_path(run_dir, job_id) / NEED_FILE


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _failed(path: Path) -> OSError:
    import ctypes

    err = ctypes.get_errno()
    return OSError(err, os.strerror(err), str(path))


def mount_area(path: Path) -> None:
    """Mount the one-page tmpfs on ``path`` (an empty directory); OSError on failure.
    Replaced by a plain directory in the unit tests (tests/conftest.py)."""
    target, options = os.fsencode(path), AREA_OPTIONS.encode()
    if _libc().mount(b"slurm-mig-need", target, b"tmpfs", _MS_FLAGS, options):
        raise _failed(path)


def unmount_area(path: Path) -> None:
    """Detach the area's tmpfs (a writer still holding it open keeps only its page);
    nothing when ``path`` is no mount point. OSError on other failures."""
    if _libc().umount2(os.fsencode(path), _UMOUNT_FLAGS):
        exc = _failed(path)
        if exc.errno not in (errno.EINVAL, errno.ENOENT):
            raise exc


def make_need_file(run_dir: Path, job_id: str, uid: int | None) -> None:
    """The Prolog: the job's need area and in it an empty need file the job's user may
    write but not read. What it made is undone on failure (OSError)."""
    if uid is None or not plain(job_id):
        return
    area = area_path(run_dir, job_id)
    drop_need_area(run_dir, job_id)  # a leftover of an earlier run, or of a version before
    os.mkdir(area, 0o711)
    try:
        mount_area(area)
        fd = os.open(area / NEED_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            if uid != os.geteuid():
                grant_user(fd, uid, 2)
        finally:
            os.close(fd)
    except OSError:
        drop_need_area(run_dir, job_id)
        raise


def drop_need_area(run_dir: Path, job_id: str) -> None:
    """The Epilog, whatever ``reports`` says: unmount and remove the job's need area
    (or the plain need file of a slurm-mig before it). OSError when it stays."""
    if not plain(job_id):
        return
    area = area_path(run_dir, job_id)
    try:
        st = os.lstat(area)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        area.unlink()
        return
    unmount_area(area)
    (area / NEED_FILE).unlink(missing_ok=True)  # a plain directory (the unit tests' fake)
    os.rmdir(area)


def write_need(path: Path, key: str, need: int) -> None:
    """``mig-run`` (the job's user): the learned need into the job's need file, which
    must exist (the Prolog made it). OSError when it cannot be written."""
    text = json.dumps({"key": key, "need": int(need)}, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _read_raw(path: Path, uid: int | None) -> tuple[bytes | None, str | None]:
    """At most `MAX_NEED_FILE` + 1 bytes of the need file, not followed if a symlink, a
    plain file of one link, root's (or, before issue 18, the job user's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as exc:
        return None, f"memory need file {_name(path)} not read: {_why(exc)}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return None, f"memory need file {_name(path)} is not a plain file; ignored"
        if uid is None or st.st_uid not in (os.geteuid(), uid):
            return None, f"memory need file {_name(path)} is not the job user's; ignored"
        return os.read(fd, MAX_NEED_FILE + 1), None
    except OSError as exc:
        return None, f"memory need file {_name(path)} not read: {_why(exc)}"
    finally:
        os.close(fd)


def read_need(
    path: Path, uid: int | None, most_bytes: int, hint_key: str | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The Epilog (root): the job's need file as untrusted input (`_read_raw`),
    ``{"key": str, "need": int}`` with a plain key (the job's hint key when it has
    one) and 1 <= need <= ``most_bytes``. (the need, None), (None, why not) or
    (None, None) when there is nothing (no file, empty)."""
    raw, problem = _read_raw(path, uid)
    if raw is None or not raw.strip():
        return None, problem
    name = _name(path)
    if len(raw) > MAX_NEED_FILE:
        return None, f"memory need file {name} is over {MAX_NEED_FILE} bytes; ignored"
    try:
        data = json.loads(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, f"memory need file {name} is not JSON; ignored"
    if not isinstance(data, dict) or set(data) != {"key", "need"}:
        return None, f"memory need file {name} is not {{key, need}}; ignored"
    key, need = data["key"], data["need"]
    if not (isinstance(key, str) and 0 < len(key) <= 128 and KEY_CHARS.issuperset(key)):
        return None, f"memory need file {name}: the key is not a job kind; ignored"
    if hint_key is not None and key != hint_key:
        return None, f"memory need file {name}: key {key!r} is not the job's; ignored"
    if not whole_number(need) or not 0 < need <= most_bytes:
        return None, f"memory need file {name}: the need is out of range; ignored"
    return {"key": key, "need": need}, None
