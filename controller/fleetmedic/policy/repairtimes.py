"""Time to repair (fence to back in service) and time between incidents, from a node's
history annotation: pure, for the controller's MTTR and MTBI histograms.

An episode starts with its first attempt (the controller begins within a cycle of the
fence, so this is the fence time to within a second or two) and ends with its last. It
was repaired ``automatic``-ally when its last attempt passed verify, ``manual``-ly when a
human released the node (or anything else ended it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleetmedic.policy.history import PASS, Attempt, parse_time


@dataclass(frozen=True)
class Episode:
    ep: int
    seconds: float  # fence to back in service
    repair: str  # automatic | manual
    ended: float  # epoch seconds


def episodes(history: Sequence[Attempt]) -> list[Episode]:
    """Every finished episode the history still holds, oldest first."""
    out = []
    for ep in sorted({a.ep for a in history}):
        mine = [a for a in history if a.ep == ep]
        start, end = parse_time(mine[0].start), parse_time(mine[-1].end)
        if start is None or end is None:
            continue
        how = "automatic" if mine[-1].result == PASS else "manual"
        out.append(Episode(ep, max(0.0, (end - start).total_seconds()), how, end.timestamp()))
    return out


def last_repair(history: Sequence[Attempt]) -> Episode | None:
    done = episodes(history)
    return done[-1] if done else None
