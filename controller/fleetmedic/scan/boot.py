"""Where the current boot starts in a kernel log file that spans reboots.

The kernel's first message of every boot is its banner (``Linux version ...``),
in every format: dmesg, syslog's kern.log, the journal, ``/dev/kmsg``. Lines
before a file's last banner belong to earlier boots.

- :func:`is_banner`: is this line a kernel banner (the message, after the
  timestamp and host tag, starts with it; a message that merely mentions
  ``Linux version`` is not).
- :func:`last_boot_offset`: byte offset of the line holding a file's last
  banner, found by reading from the end, so earlier boots are never read.

Known gap: a banner glued to a line left unfinished by a crash
(``garbage[0.0] Linux version``) is not recognised.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from fleetmedic.scan.parser import parse

BANNER = "Linux version "
_BANNER_BYTES = BANNER.encode()
BLOCK = 1 << 20  # bytes read per step, from the end
MAX_LINE = 1 << 20  # a longer "line" cannot hold a banner


def is_banner(line: str) -> bool:
    return BANNER in line and parse(line).message.startswith(BANNER)


def last_boot_offset(handle: BinaryIO) -> int | None:
    """Byte offset of the line holding the last kernel banner in ``handle``'s file, or
    ``None`` without one. Only whole lines count: a last line without its newline is
    not written yet.

    Reads backwards a block at a time with ``pread`` rather than mapping the file: a
    mapped log truncated by a rotation meanwhile would kill the agent with SIGBUS.
    """
    fd = handle.fileno()
    pos = os.fstat(fd).st_size
    tail = b""  # the first line of the window to the right (it began further left)
    whole = False  # False until the file's last newline is found
    while pos > 0:
        start = max(0, pos - BLOCK)
        data = os.pread(fd, pos - start, start) + tail
        limit = len(data)
        if not whole:
            limit = data.rfind(b"\n") + 1
            whole = limit > 0
        search_end = limit
        while (at := data.rfind(_BANNER_BYTES, 0, search_end)) >= 0:
            line_start = data.rfind(b"\n", 0, at) + 1
            if line_start == 0 and start > 0:
                break  # the line may begin in the block to the left: look again there
            if is_banner(data[line_start : data.find(b"\n", at, limit)].decode("utf-8", "replace")):
                return start + line_start
            search_end = line_start
        first_newline = data.find(b"\n")
        tail = data[: first_newline + 1] if first_newline >= 0 else data
        if len(tail) > MAX_LINE:  # no banner is this long: drop it, as if the file ended here
            tail, whole = b"", False
        pos = start
    return None
