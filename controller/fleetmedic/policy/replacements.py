"""How many nodes a pool handed to its cloud in the last 24 hours (the replace rung's
``safety.max_replacements_per_day``), as pure functions over a small record.

The record cannot live on the Nodes: a replaced node's Node goes away with it. It is kept
on the pause ConfigMap beside the breaker's (data key ``replacements``, or
``replacements.<profile>``), written *before* the hand-off, so a controller restart never
forgets a replacement and never lets a pool exceed its day. An entry is per node and
episode: the hand-off of a node resumed after a restart finds its own entry and is not
counted (or held) twice.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta

from fleetmedic.policy.history import parse_time, stamp

DAY = timedelta(days=1)
RECORD_KEY = "replacements"


def record_key(profile: str = "default") -> str:
    """The pause ConfigMap's data key of ``profile``'s record."""
    return RECORD_KEY if profile == "default" else f"{RECORD_KEY}.{profile}"


@dataclasses.dataclass(frozen=True)
class Entry:
    node: str
    ep: int
    at: str  # RFC 3339: when the hand-off was admitted


@dataclasses.dataclass(frozen=True)
class Reservation:
    ok: bool
    entries: tuple[Entry, ...]  # the record to write (the last day's, with this one)
    why: str = ""  # when not ok: why not now
    retry_at: datetime | None = None  # when not ok: when a slot frees up
    counted: bool = False  # ok because this node and episode was counted already

    @property
    def changed(self) -> bool:
        return self.ok and not self.counted


def decode(raw: str | None) -> tuple[Entry, ...]:
    """The record; ValueError when present but unreadable (the caller then holds: a record
    it cannot read may say the day's replacements are spent)."""
    if not raw:
        return ()
    try:
        entries = tuple(Entry(**e) for e in json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"unreadable replacements record: {exc}") from None
    if any(parse_time(e.at) is None for e in entries):
        raise ValueError(f"unreadable replacements record: {raw[:80]}")
    return entries


def encode(entries: tuple[Entry, ...]) -> str:
    return json.dumps([dataclasses.asdict(e) for e in entries], separators=(",", ":"))


def recent(entries: tuple[Entry, ...], now: datetime) -> tuple[Entry, ...]:
    """The entries of the last 24 hours (older ones are forgotten on the next write)."""
    return tuple(e for e in entries if now - parse_time(e.at) < DAY)  # type: ignore[operator]


def reserve(
    entries: tuple[Entry, ...], node: str, ep: int, limit: int, now: datetime
) -> Reservation:
    """May ``node`` (episode ``ep``) be handed to the cloud now, with at most ``limit`` a day?"""
    day = recent(entries, now)
    if any(e.node == node and e.ep == ep for e in day):
        return Reservation(True, day, counted=True)
    if len(day) >= limit:
        times = [t for t in (parse_time(e.at) for e in day) if t is not None]
        retry = min(times) + DAY if times else now + DAY
        why = (
            f"{len(day)} replacement(s) in the last 24 h, limit {limit} "
            "(safety.max_replacements_per_day)"
        )
        return Reservation(False, day, why=why, retry_at=retry)
    return Reservation(True, (*day, Entry(node, ep, stamp(now))))
