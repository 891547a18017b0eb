"""Split one log line into its timestamp and the kernel message.

:func:`parse` recognises the formats a GPU node's kernel log comes in and
never raises. Whatever it does not recognise is kept whole as the message.

================================  ===============================================================
format                            example (prefix only)
================================  ===============================================================
dmesg                             ``[ 1843.308145] NVRM: ...``
dmesg -T / --ctime                ``[Fri Aug 30 11:43:09 2024] NVRM: ...``
dmesg --time-format iso           ``2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: ...``
dmesg -x (decoded facility)       ``kern  :err   : [ 12.3] ...`` (then any of the above)
journalctl (short), syslog        ``Feb 14 05:03:41 host kernel: ...`` (``--no-hostname`` too)
journalctl -o short-iso(-precise) ``2024-02-14T05:03:41+0000 host kernel: ...``
RFC 5424-ish syslog               ``2024-02-14T05:03:41.123456+00:00 host kernel: ...``
syslog with kernel time           ``Dec  2 11:49:53 worker4 kernel: [  885.242168] NVRM: ...``
raw syslog priority               ``<3>Feb 14 05:03:41 host kernel: ...``
Talos (talosctl dmesg)            ``node: kern:    warning: [2026-04-22T21:27:51.29Z]: NVRM: ...``
/dev/kmsg                         ``6,1234,5678901,-;NVRM: ...`` (``\\x0a`` escapes are unescaped)
kubectl logs --timestamps         ``2024-02-14T05:03:41.123456789Z RuntimeError: CUDA error: ...``
Fabric Manager's log              ``[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch ...``
================================  ===============================================================

Timestamps are converted to seconds once per distinct text (cached): the
kernel's ``[uptime]`` and ``/dev/kmsg`` microseconds on the ``uptime``
clock, everything else as Unix time on the ``wall`` clock. A syslog stamp has
no year; the current year is assumed (a known gap across New Year).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache

from fleetmedic.scan import regexcache

_KMSG = regexcache.compile(r"(\d{1,3}),(\d+),(\d+),([^;,]*)(?:,[^;]*)?;")
_UPTIME = regexcache.compile(r"\[\s*(\d+\.\d+)\]\s?")
_CTIME = regexcache.compile(
    r"\[((?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?"
)
_FM = regexcache.compile(
    r"\[((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d{4} \d\d:\d\d:\d\d)\] "
    r"\[(FATAL|ERROR|WARNING|WARN|NOTICE|INFO|DEBUG)\] (?:\[tid \d+\] )?"
)
_FM_LEVELS = {"FATAL": 2, "ERROR": 3, "WARNING": 4, "WARN": 4, "NOTICE": 5, "INFO": 6, "DEBUG": 7}
_DECODED = regexcache.compile(
    r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local\d)\s*:"
    r"\s*(emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?"
)
_TALOS = regexcache.compile(
    r"(?:[^\s:]+: )?kern:\s*(emerg|alert|crit|err|warning|notice|info|debug):\s*"
    r"\[(\d{4}-\d\d-\d\dT[^\]]+)\]:\s?"
)
LEVELS = {
    "emerg": 0,
    "alert": 1,
    "crit": 2,
    "err": 3,
    "warn": 4,
    "warning": 4,
    "notice": 5,
    "info": 6,
    "debug": 7,
}
"""syslog severities (``<pri> & 7``), as ``dmesg -x`` (and Talos: ``warning``) names them."""
_ISO = regexcache.compile(
    r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\s+"
)
_SYSLOG = regexcache.compile(
    r"((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,9})?)\s+"
)
_PRIORITY = regexcache.compile(r"<\d{1,3}>")
# "host tag: " or "tag: " after a syslog/journal timestamp. A tag is a program
# name with an optional [pid]; a host is any token that does not end in ":".
_HOST_TAG = regexcache.compile(
    r"(?:(?P<host>[^\s:](?:\S*[^\s:])?)\s+)?(?P<tag>[A-Za-z_][\w.@/-]*)(?:\[\d+\])?:\s?"
)
_ESCAPE = regexcache.compile(r"\\x([0-9a-fA-F]{2})")


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One parsed line.

    - ``message``: the text after the log prefix (never ``None``).
    - ``timestamp``: the timestamp as written (without brackets), or ``None``.
    - ``kind``: which timestamp format (``uptime``, ``kmsg``, ``iso``,
      ``syslog``, ``ctime``) or ``None``.
    - ``kmsg``: the line was a ``/dev/kmsg`` record (its continuation lines,
      which start with a space, carry ``KEY=value`` pairs).
    - ``seq``: the ``/dev/kmsg`` sequence number.
    - ``level``: the kernel log level (0 emerg .. 3 err .. 7 debug) when the line
      carries one (``/dev/kmsg``'s ``pri,``, a ``<pri>`` prefix, ``dmesg -x``'s
      ``kern  :err   :``), else ``None`` (plain dmesg, syslog and journal text).

    :attr:`time` and :attr:`clock` are computed on demand (most candidate
    lines never need them).
    """

    message: str
    timestamp: str | None = None
    kind: str | None = None
    kmsg: bool = False
    seq: int | None = None
    level: int | None = None

    @property
    def time(self) -> float | None:
        """Seconds: since boot on the ``uptime`` clock, Unix time on the ``wall`` clock."""
        return seconds(self.timestamp, self.kind)

    @property
    def clock(self) -> str | None:
        """``"uptime"``, ``"wall"``, or ``None`` when there is no usable time."""
        return clock_of(self.kind, self.time)


Fields = tuple[str, str | None, str | None, bool, int | None, int | None]
"""A :class:`Record`'s fields in its order, as :func:`fields` returns them."""


def parse(line: str) -> Record:
    """Parse one line (a ``/dev/kmsg`` record may carry its continuation lines).

    Never raises; an unknown format yields ``Record(message=line.strip())``.
    """
    return Record(*fields(line))


def seconds(timestamp: str | None, kind: str | None) -> float | None:
    """:attr:`Record.time` of a record with this ``timestamp`` and ``kind``."""
    if timestamp is None or kind is None:
        return None
    return _SECONDS[kind](timestamp)


def clock_of(kind: str | None, time: float | None) -> str | None:
    """:attr:`Record.clock` of a record of this ``kind`` whose :attr:`Record.time` is
    ``time``."""
    if kind == "uptime" or kind == "kmsg":
        return "uptime"
    return "wall" if time is not None else None


def fields(line: str) -> Fields:
    """What :func:`parse` gives, as a plain tuple (the scanner parses every candidate
    line; building a frozen record each time was a tenth of its Python time)."""
    text = line.rstrip("\r\n")
    match = _KMSG.match(text)
    if match is not None:
        return _parse_kmsg(text, match)
    text = text.strip()
    level: int | None = None
    if text.startswith("<"):
        prio = _PRIORITY.match(text)
        if prio is not None:
            level = int(text[1 : prio.end() - 1]) & 7
            text = text[prio.end() :]
    if text.find("kern:", 0, 48) != -1:
        talos = _TALOS.match(text)
        if talos is not None:
            found = text[talos.end() :].strip()
            return (found, talos.group(2), "iso", False, None, LEVELS[talos.group(1)])
    decoded = _DECODED.match(text)
    if decoded is not None:
        level = LEVELS[decoded.group(1)]
        text = text[decoded.end() :]
    message, stamp, kind, own = _parse_text(text)
    return (message, stamp, kind, False, None, own if level is None else level)


Parsed = tuple[str, str | None, str | None, int | None]
"""Message, timestamp, kind and the level the format itself carries (Fabric Manager's)."""


def _parse_text(text: str) -> Parsed:
    if text.startswith("["):
        return _parse_bracketed(text)
    if text[:1].isdigit():
        match = _ISO.match(text)
        if match is not None:
            stamp = match.group(1)
            rest = _strip_host_tag(text[match.end() :])
            return _with_kernel_time(rest, stamp, "iso")
    elif text[:1].isupper():
        match = _SYSLOG.match(text)
        if match is not None:
            stamp = match.group(1)
            rest = _strip_host_tag(text[match.end() :])
            return _with_kernel_time(rest, stamp, "syslog")
    return (text, None, None, None)


def _parse_kmsg(text: str, match: re.Match[str]) -> Fields:
    head, _, _dictionary = text.partition("\n")
    body = head[match.end() :]
    if "\\x" in body:
        body = _ESCAPE.sub(_unescape, body)
    usec = match.group(3)
    stamp = f"{usec[:-6] or '0'}.{usec[-6:].rjust(6, '0')}"
    return (body.strip(), stamp, "kmsg", True, int(match.group(2)), int(match.group(1)) & 7)


def _unescape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return " " if char in "\n\r\t" else char


def _parse_bracketed(text: str) -> Parsed:
    match = _UPTIME.match(text)
    if match is not None:
        return (text[match.end() :].strip(), match.group(1), "uptime", None)
    match = _CTIME.match(text)
    if match is not None:
        return (text[match.end() :].strip(), match.group(1), "ctime", None)
    match = _FM.match(text)
    if match is not None:
        level = _FM_LEVELS[match.group(2)]
        return (text[match.end() :].strip(), match.group(1), "fm", level)
    return (text, None, None, None)


def _strip_host_tag(rest: str) -> str:
    """Drop ``host kernel: `` / ``kernel: `` / ``prog[pid]: `` after a timestamp."""
    match = _HOST_TAG.match(rest)
    if match is None:
        return rest
    # Without a host, "word: text" is ambiguous: journalctl --no-hostname
    # writes "kernel: ...", but dmesg --time-format iso writes the message
    # itself ("nvidia-nvswitch1: SXid ..."). Strip only "kernel:" or "prog[pid]:".
    if match.group("host") is None and match.group("tag") != "kernel" and "[" not in match.group(0):
        return rest
    return rest[match.end() :]


def _with_kernel_time(rest: str, stamp: str, kind: str) -> Parsed:
    """Keep the outer (wall-clock) stamp; drop an inner ``[uptime]`` if present."""
    if rest.startswith("["):
        inner = _UPTIME.match(rest)
        if inner is not None:
            rest = rest[inner.end() :]
    return (rest.strip(), stamp, kind, None)


@lru_cache(maxsize=4096)
def _iso_seconds(stamp: str) -> float | None:
    text = stamp.replace(",", ".").replace(" ", "T")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    if len(text) > 5 and text[-5] in "+-" and text[-3] != ":":
        text = text[:-2] + ":" + text[-2:]
    head, dot, tail = text.partition(".")
    if dot:
        # fromisoformat takes at most 6 fractional digits before Python 3.11.
        digits = "".join(ch for ch in tail if ch.isdigit())
        zone = tail[len(digits) :]
        text = f"{head}.{digits[:6]}{zone}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}


@lru_cache(maxsize=1024)
def _hour_start(year: int, month: int, day: int, hour: int) -> float:
    """Unix time of a local wall-clock hour (cached: a log spans few hours).

    Raises ``ValueError`` for a day that does not exist (Feb 30).
    """
    datetime(year, month, day)
    return time.mktime((year, month, day, hour, 0, 0, 0, 0, -1))


def _local_seconds(year: int, month: str, day: str, clock: str) -> float | None:
    """``"HH:MM:SS[.ffffff]"`` on a local calendar day as Unix time; ``None`` if invalid."""
    try:
        hour, minute, second = clock.split(":")
        whole, _, frac = second.partition(".")
        h, m, sec = int(hour), int(minute), int(whole)
        if not (0 <= h < 24 and 0 <= m < 60 and 0 <= sec < 62):
            return None
        base = _hour_start(year, _MONTHS[month], int(day), h)
        return base + m * 60 + sec + (float(f"0.{frac}") if frac else 0.0)
    except (ValueError, KeyError, OverflowError):
        return None


@lru_cache(maxsize=4096)
def _syslog_seconds(stamp: str) -> float | None:
    parts = stamp.split()
    if len(parts) != 3:
        return None
    month, day, clock = parts
    return _local_seconds(time.localtime().tm_year, month, day, clock)


@lru_cache(maxsize=4096)
def _ctime_seconds(stamp: str) -> float | None:
    parts = stamp.split()
    if len(parts) != 5 or not parts[4].isdigit():
        return None
    _weekday, month, day, clock, year = parts
    return _local_seconds(int(year), month, day, clock)


def _uptime_seconds(stamp: str) -> float | None:
    try:
        return float(stamp)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def _fm_seconds(stamp: str) -> float | None:
    """``Jul 23 2024 07:53:55`` (Fabric Manager's log, local time)."""
    parts = stamp.split()
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    month, day, year, clock = parts
    return _local_seconds(int(year), month, day, clock)


_SECONDS: dict[str, Callable[[str], float | None]] = {
    "uptime": _uptime_seconds,
    "kmsg": _uptime_seconds,
    "iso": _iso_seconds,
    "syslog": _syslog_seconds,
    "ctime": _ctime_seconds,
    "fm": _fm_seconds,
}
