"""systemd's notification protocol (sd_notify(3)), in the standard library.

With ``Type=notify`` systemd sets ``$NOTIFY_SOCKET`` to a datagram socket: a path, or
an abstract-namespace name written with a leading ``@``. A service sends newline
separated ``KEY=VALUE`` lines there: ``READY=1`` once it is up, ``STATUS=...`` for
``systemctl status``, ``STOPPING=1`` as it stops and, with ``WatchdogSec=``,
``WATCHDOG=1`` at least every ``$WATCHDOG_USEC`` / 2 microseconds, or systemd kills and
(with ``Restart=on-failure``) restarts it. Without ``$NOTIFY_SOCKET`` every call is a
no-op, so the daemon runs the same outside systemd.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


def notify(state: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. ``"READY=1\\nSTATUS=planning"``); True when it went out."""
    env = os.environ if env is None else env
    address = env.get("NOTIFY_SOCKET", "")
    if not address or address[0] not in "/@":  # unset, or a vsock address: not ours
        return False
    target = "\0" + address[1:] if address[0] == "@" else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(target)
            s.sendall(state.encode("utf-8", "replace"))
    except OSError:
        return False
    return True


def watchdog_seconds(env: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """systemd's watchdog timeout for this process (``$WATCHDOG_USEC``), or None when
    there is none or it is meant for another process (``$WATCHDOG_PID``)."""
    env = os.environ if env is None else env
    try:
        usec = int(env.get("WATCHDOG_USEC", "0"))
        owner = env.get("WATCHDOG_PID")
        if owner and int(owner) != (os.getpid() if pid is None else pid):
            return None
    except ValueError:
        return None
    return usec / 1e6 if usec > 0 else None
