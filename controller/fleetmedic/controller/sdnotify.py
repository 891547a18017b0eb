"""systemd's sd_notify protocol: READY=1, WATCHDOG=1, STATUS=...

Hand-written because it is one datagram on a unix socket, and the PyPI
packages for it are unmaintained; outside systemd ($NOTIFY_SOCKET unset)
every call is a no-op.
"""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):  # abstract namespace socket
        path = "\0" + path[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(path)
            sock.sendall(message.encode())
        return True
    except OSError:
        return False


def watchdog_interval() -> float | None:
    """Half of WATCHDOG_USEC in seconds (how often to ping), or None if off."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None
