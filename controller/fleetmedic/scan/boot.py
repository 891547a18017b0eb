"""Where the current boot starts in a kernel log file that spans reboots.

The kernel's first message of every boot is its banner (``Linux version ...``),
in every format: dmesg, syslog's kern.log, the journal, ``/dev/kmsg``. Lines
before a file's last banner belong to earlier boots.

- :func:`is_banner`: is this line a kernel banner (the message, after the
  timestamp and host tag, starts with it; a message that merely mentions
  ``Linux version`` is not).
- :func:`last_boot_offset`: byte offset of the line holding a file's last
  banner, found from the end with mmap, so earlier boots are never read.

Known gap: a banner glued to a line left unfinished by a crash
(``garbage[0.0] Linux version``) is not recognised.
"""

from __future__ import annotations

import mmap
from typing import BinaryIO

from fleetmedic.scan.parser import parse

BANNER = "Linux version "
_BANNER_BYTES = BANNER.encode()


def is_banner(line: str) -> bool:
    return BANNER in line and parse(line).message.startswith(BANNER)


def last_boot_offset(handle: BinaryIO) -> int | None:
    """Byte offset of the line holding the last kernel banner in ``handle``'s file, or
    ``None`` without one. Only whole lines count: a last line without its newline is
    not written yet. Raises OSError if the file cannot be mapped (not a regular file)."""
    try:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError:  # an empty file cannot be mapped
        return None
    with data:
        end = data.rfind(b"\n") + 1
        while (at := data.rfind(_BANNER_BYTES, 0, end)) >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            if is_banner(data[start:data.find(b"\n", at)].decode("utf-8", "replace")):
                return start
            end = start     # only mentions the banner: look before this line
    return None
