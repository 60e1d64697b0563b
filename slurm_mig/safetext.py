"""Text from Slurm and its users (job names, users, comments, reasons, node names) made
safe to show, and log files only their owner reads.

On a terminal no character of such text may move the cursor, set the title, clear the
screen or open a link; in a log every record stays one line, so a job name cannot forge
another record. `printable` writes every character that is not printable (C0 and C1
controls, DEL, the Unicode format and bidi controls, line and paragraph separators) as
its Python escape; `LogEscaper` does it for every record a logging handler writes;
`open_private_log` opens a log file created 0600 and refuses one that others can read.
Standard library only, and no logging import: the hooks import this module.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

MAX_LOG_MESSAGE = 64 << 10  # characters of one log record's message (a cycle's longest lines
# list a few hundred job ids)
ELLIPSIS = "…"


def printable(text: object, most: int | None = None) -> str:
    """``str(text)`` with every character that is not printable (``str.isprintable``)
    written as its Python escape (``\\n``, ``\\x1b``, ``\\x9b``, ``\\u202e``), cut to at
    most ``most`` characters (ending in "…") when ``most`` is given."""
    s = str(text)
    if most is not None and len(s) > most:
        s = s[: max(0, most - 1)]
        cut = True
    else:
        cut = False
    if not s.isprintable():
        s = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)
        if most is not None and len(s) > most:
            s, cut = s[: max(0, most - 1)], True
    return s + ELLIPSIS if cut else s


class LogEscaper:
    """A logging filter for a handler: the record's message (with its arguments) becomes
    one printable line (`printable`) before any formatter sees it, and each line of its
    traceback is escaped and indented, so nothing a message carries starts a line."""

    slurm_mig_escaper = True  # how `install_escaper` knows a handler has one

    def filter(self, record: Any) -> bool:
        """Escape ``record`` in place; always keep it."""
        try:
            message = record.getMessage()
        except Exception:  # a bad format string or argument: show what there is
            message = f"{record.msg!r} % {record.args!r}"
        record.msg, record.args = printable(message, MAX_LOG_MESSAGE), None
        if record.exc_info and not record.exc_text:
            import traceback

            record.exc_text = "".join(traceback.format_exception(*record.exc_info))
        if record.exc_text:
            record.exc_text = _indented(record.exc_text)
        if record.stack_info:
            record.stack_info = _indented(record.stack_info)
        return True


def _indented(text: str) -> str:
    if text.startswith("    | "):  # escaped by another handler's filter already
        return text
    return "\n".join("    | " + printable(line) for line in text.rstrip("\n").split("\n"))


def install_escaper(handlers: Any) -> None:
    """Add one `LogEscaper` to each of ``handlers`` that has none."""
    for h in handlers:
        if not any(getattr(f, "slurm_mig_escaper", False) for f in h.filters):
            h.addFilter(LogEscaper())


class UnsafeLogFile(ValueError):
    """A log file others could read or that is not its writer's: the message says which
    and the fix, in one line."""


def open_private_log(path: str | Path, create: bool = True) -> int:
    """A descriptor that appends to the log file ``path``: created 0600 when missing
    (``create``), never through a symbolic link. UnsafeLogFile when the file is not a
    plain file, not root's (or this user's), or group/other may read or write it;
    OSError when it cannot be opened."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: the last component is a link
            raise UnsafeLogFile(
                f"{path}: is a symbolic link; give the log file's own path"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        problem = _unsafe(st, str(path))
        if problem:
            raise UnsafeLogFile(problem)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _unsafe(st: os.stat_result, path: str) -> str:
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: not a plain file; give the path of a log file"
    if st.st_uid not in (0, os.geteuid()):
        return (
            f"{path}: owned by uid {st.st_uid}, not root; remove it (slurm-mig creates it "
            f"0600) or run 'chown root {path}'"
        )
    if st.st_mode & 0o077:
        return (
            f"{path}: group or others may read it (mode {st.st_mode & 0o777:04o}) and it "
            f"holds MIG UUIDs and jobs' reasons; run 'chmod 600 {path}'"
        )
    return ""
