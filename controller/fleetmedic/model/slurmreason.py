"""The drain reason fleetmedic writes on a Slurm node: the Slurm counterpart of our taint.

    fleetmedic: <rung>: <finding>

One format, here at the bottom layer, so the adapter that writes it, the adapter's guard
that refuses to resume a node whose reason is not ours, and the ownership policy
(model/slurmowner.py) can never disagree. The prefix is configurable (a site may run two
fleetmedic installations, or want its own word); the default is ``fleetmedic:``.

A reason is ours only while it starts with our prefix, exactly: if someone edits it, the
node is theirs. Slurm may append to a reason (``scontrol reboot`` makes it
``<reason> : reboot issued``); the prefix still leads, so it stays ours.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from fleetmedic.model.vocabulary import REPAIR_STATES

DEFAULT_PREFIX = "fleetmedic:"
FINDING_MAX = 200
"""Characters of the finding kept in the reason: enough for a catalog finding's name and
detail (``xid 79 on GPU 0000:3b:00.0: fallen off the bus``), short enough that ``sinfo -R``
and ``scontrol show node`` stay readable. The full evidence lives in the repair record."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class OurReason(NamedTuple):
    rung: str
    finding: str


def check_prefix(prefix: str) -> str:
    """``prefix`` if usable: printable, no spaces at its ends, not empty (ValueError)."""
    if not prefix or prefix != prefix.strip() or _CONTROL.search(prefix):
        raise ValueError(f"bad Slurm reason prefix {prefix!r}: printable, no edge spaces")
    return prefix


def format_reason(rung: str, finding: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The reason for a fence at ``rung`` (one of REPAIR_STATES) for ``finding``: one
    line, control characters and runs of spaces collapsed, the finding cut to FINDING_MAX."""
    if rung not in REPAIR_STATES:
        raise ValueError(f"unknown rung {rung!r} (one of {', '.join(REPAIR_STATES)})")
    text = " ".join(_CONTROL.sub(" ", finding).split()) or "no finding"
    if len(text) > FINDING_MAX:
        text = text[: FINDING_MAX - 1] + "…"
    return f"{check_prefix(prefix)} {rung}: {text}"


def is_ours(reason: str | None, prefix: str = DEFAULT_PREFIX) -> bool:
    """True when ``reason`` starts with our prefix (exactly: an edited reason is not ours)."""
    return bool(reason) and reason.startswith(prefix)  # type: ignore[union-attr]


def parse_reason(reason: str | None, prefix: str = DEFAULT_PREFIX) -> OurReason | None:
    """The rung and finding of a reason of ours, or None (not ours, or not our format:
    a reason someone rewrote after our prefix names no rung we know)."""
    if not is_ours(reason, prefix):
        return None
    rung, sep, finding = (reason or "")[len(prefix) :].strip().partition(":")
    if not sep or rung not in REPAIR_STATES:
        return None
    return OurReason(rung, finding.strip())
