"""Where the agent reads kernel log lines from, and what a log file holds now.

- :func:`kind_of`: ``file``, ``kmsg`` (``/dev/kmsg`` or any character device),
  ``journal`` or ``none``.
- :func:`prescan`: the start line of a file's last boot (its last kernel banner,
  found by :func:`fleetmedic.scan.last_boot_offset`) and the fingerprints of that
  boot's findings, so the watermark can be found again. Earlier boots are only
  counted, not parsed; the last boot is read in Python, about a second per
  million lines.
- ``file_now`` / ``journal_now``: what a source holds now, for ``--once``
  (``/dev/kmsg``: :func:`fleetmedic.scan.read_kmsg`; the daemon follows with
  :mod:`fleetmedic.scan`'s followers).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from typing import BinaryIO

from fleetmedic.agent.watermark import fingerprint, segment_id
from fleetmedic.scan import BANNER, Scanner, is_banner, last_boot_offset
from fleetmedic.scan.stream import journal_line

_BANNER_BYTES = BANNER.encode()


def kind_of(source: str) -> str:
    if source in ("kmsg", "journal", "none"):
        return source
    try:
        if stat.S_ISCHR(os.stat(source).st_mode):
            return "kmsg"
    except OSError:
        pass
    return "file"


def read_boot_id(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "unknown"


@dataclasses.dataclass
class Prescan:
    """A file's current boot, found before following it."""

    start: int = 0  # line of the last kernel banner (0: none)
    seg: str = ""
    seen: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # fingerprint -> lines


def prescan(path: str) -> Prescan:
    """Where the file's last boot starts, and the fingerprints of that boot's findings.
    A missing file is an empty one. A last line without its newline is not read yet."""
    out = Prescan()
    scanner = Scanner(dedup=False)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return out
    with f:
        offset = last_boot_offset(f)
        before = 0 if offset is None else _lines_before(f, offset)
        for n, raw in enumerate(f, start=before + 1):
            if not raw.endswith(b"\n"):
                break
            if _BANNER_BYTES in raw:
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                if is_banner(text):  # the last boot's banner, or one appended since the search
                    out = Prescan(n, segment_id(text, n))
                    continue
            for finding in scanner.feed(raw.rstrip(b"\r\n"), n):
                out.seen.setdefault(fingerprint(finding), []).append(finding.line)
        for finding in scanner.flush():  # a report held for a next line that is not there yet
            out.seen.setdefault(fingerprint(finding), []).append(finding.line)
    return out


def _lines_before(f: BinaryIO, offset: int) -> int:
    """Lines in the first ``offset`` bytes of ``f``; leaves ``f`` at ``offset``."""
    f.seek(0)
    count = 0
    while f.tell() < offset:
        chunk = f.read(min(offset - f.tell(), 1 << 20))
        if not chunk:
            break
        count += chunk.count(b"\n")
    return count


def file_now(path: str) -> Iterator[str]:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return
            yield raw.rstrip(b"\r\n").decode("utf-8", "replace")


def journal_now(
    select_: tuple[str, ...] = ("-k",), journalctl: str = "journalctl"
) -> Iterator[str]:
    """This boot's messages from the journal (the kernel's, or ``("-u", UNIT)``), each with
    its priority (:func:`fleetmedic.scan.stream.journal_line`); journalctl must answer
    within 60 s."""
    proc = subprocess.run(
        [journalctl, *select_, "-b", "-o", "json", "--no-pager"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    for raw in proc.stdout.splitlines():
        try:
            line = journal_line(json.loads(raw))
        except ValueError:
            continue
        if line is not None:
            yield line
