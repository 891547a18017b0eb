"""The kernel-log watermark: which finding the agent last acted on, per boot.

A restarted agent reads the current boot's kernel log again from its start, so
it never misses a line written while it was down. The watermark, kept in the
Node annotation ``fleetmedic.io/last-finding``, stops it from acting twice on
a line it already handled (a human may have released the node since).

Positions:

- ``boot``: the kernel boot id (``/proc/sys/kernel/random/boot_id``).
- ``seg``: the log segment of this boot. In a file that spans reboots, every
  kernel banner (``Linux version ...``) starts a segment; lines before the last
  banner belong to an earlier boot and are never acted on. ``seg`` is the
  banner's hash and line number (identical ``[0.000000] Linux version`` lines
  of two boots still differ by position); ``""`` without a banner (``/dev/kmsg``,
  or a file rotated in mid-boot).
- ``fp``: a fingerprint of the finding (timestamp, rule, device, message), and
  ``n`` its line number, to find the very line again.
- ``t`` / ``c``: the finding's time and clock, for sources whose lines cannot
  be found again (``/dev/kmsg`` after a restart, a rotated file).

A finding is *stale* (already handled) when:

1. the boot and segment are the watermark's (or this file has no banner: it was
   rotated in mid-boot), the watermark's line is found again (same fingerprint;
   the one at ``n`` if several) and the finding is at or before it; or else
2. boot, segment and clock are the watermark's and the finding is not newer.

Everything else is new. Known gap: lines in a file rotated away while the agent
was down are not read (follow the journal or /dev/kmsg where that matters).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from fleetmedic.scan import Finding

MAX_MESSAGE = 160  # characters of the finding's text kept in the annotation


def fingerprint(finding: Finding) -> str:
    text = f"{finding.timestamp}|{finding.rule}|{finding.pci}|{finding.message}"
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:12]


def segment_id(banner: str, line: int) -> str:
    """The id of the log segment started by kernel banner ``banner`` at ``line``."""
    return f"{hashlib.sha1(banner.strip().encode('utf-8', 'replace')).hexdigest()[:8]}@{line}"


@dataclasses.dataclass(frozen=True)
class Mark:
    boot: str
    seg: str
    fp: str
    n: int
    t: float | None = None
    c: str | None = None
    # what it was, for people reading the annotation
    rule: str = ""
    pci: str | None = None
    action: str = ""
    acted: bool = True  # False: seen while the node was already under repair
    msg: str = ""
    at: str = ""  # RFC 3339 time it was handled

    @classmethod
    def of(cls, finding: Finding, *, boot: str, seg: str, line: int, acted: bool, at: str) -> Mark:
        return cls(
            boot=boot,
            seg=seg,
            fp=fingerprint(finding),
            n=line,
            t=finding.time,
            c=finding.clock,
            rule=finding.rule,
            pci=finding.pci,
            action=finding.action,
            acted=acted,
            msg=finding.message[:MAX_MESSAGE],
            at=at,
        )

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: object) -> Mark | None:
        """Tolerant: anything malformed reads as "no watermark" (act on what is there)."""
        if not isinstance(data, Mapping):
            return None
        try:
            t = data.get("t")
            return cls(
                boot=str(data["boot"]),
                seg=str(data.get("seg", "")),
                fp=str(data["fp"]),
                n=int(data.get("n", 0)),
                t=float(t) if isinstance(t, (int, float)) else None,
                c=str(data["c"]) if data.get("c") else None,
                rule=str(data.get("rule", "")),
                pci=data.get("pci"),
                action=str(data.get("action", "")),
                acted=bool(data.get("acted", True)),
                msg=str(data.get("msg", "")),
                at=str(data.get("at", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None


def locate(mark: Mark | None, seen: Mapping[str, Iterable[int]]) -> int | None:
    """Line of ``mark`` among this segment's findings (``fingerprint -> lines``), if there."""
    if mark is None or mark.fp not in seen:
        return None
    lines = sorted(seen[mark.fp])
    if not lines:
        return None
    return mark.n if mark.n in lines else lines[-1]


def is_stale(
    finding: Finding, line: int, mark: Mark | None, *, boot: str, seg: str, mark_line: int | None
) -> bool:
    """Was ``finding`` (at ``line`` of segment ``seg`` of boot ``boot``) handled already?"""
    if mark is None or mark.boot != boot:
        return False
    if mark_line is not None and (mark.seg == seg or seg == ""):
        return line <= mark_line
    if mark.seg != seg or mark.c is None or mark.t is None:
        return False
    return finding.clock == mark.c and finding.time is not None and finding.time <= mark.t
