"""The circuit breaker: too many nodes turning unhealthy at once stops automation.

More than ``threshold_percent`` of the pool (and at least ``min_nodes``)
turning unhealthy within ``window`` trips it. While open, ``budget.admit``
holds every action; :func:`observe` reports the trip once (``tripped_now``),
so exactly one storm email goes out. A human resets it (or ``cooldown`` does).

Level-triggered, so nothing is replayed: the breaker only remembers *which*
nodes were unhealthy and *when it first saw each turn*; on reset that memory is
kept as the new baseline and the storm's transitions are dropped, so they
neither re-trip it nor count again. The first observation after a start is a
baseline too, so a restart never looks like a storm.

An open breaker survives restarts and leader changes: the controller writes a
:class:`Record` of the trip on its pause ConfigMap (data key ``breaker``) and a
new leader starts from it (:func:`resume`). ``fleetmedic breaker reset`` clears
the trip on that record; the leader sees the record no longer names its trip
(:func:`reset_elsewhere`) and resets.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from datetime import datetime, timedelta

from fleetmedic.model.config import BreakerConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.history import parse_time, stamp


@dataclasses.dataclass(frozen=True)
class BreakerState:
    primed: bool = False  # a baseline has been taken
    unhealthy: frozenset[str] = frozenset()  # nodes unhealthy at the last observation
    turned: tuple[tuple[str, str], ...] = ()  # (node, when it turned unhealthy), in window
    tripped_at: str | None = None
    reset_at: str | None = None

    @property
    def open(self) -> bool:
        return self.tripped_at is not None


@dataclasses.dataclass(frozen=True)
class Observation:
    state: BreakerState
    tripped_now: bool  # send the storm email (exactly once per trip)
    recent: int  # nodes that turned unhealthy within the window
    limit: int  # more than this many trips it


def unhealthy_names(views: Iterable[NodeView]) -> frozenset[str]:
    """In repair, or flagged by a foreign signal."""
    return frozenset(v.name for v in views if v.state != "healthy" or v.foreign_signals)


def limit(pool: int, cfg: BreakerConfig) -> int:
    """The largest number of recent turns that does not trip the breaker."""
    return max(cfg.min_nodes - 1, int(pool * cfg.threshold_percent / 100))


def observe(
    state: BreakerState, unhealthy: frozenset[str], pool: int, now: datetime, cfg: BreakerConfig
) -> Observation:
    cap = limit(pool, cfg)
    if not state.primed:  # a baseline; a trip restored from the record stays open
        return Observation(
            BreakerState(
                primed=True,
                unhealthy=unhealthy,
                tripped_at=state.tripped_at,
                reset_at=state.reset_at,
            ),
            False,
            0,
            cap,
        )
    since = now - timedelta(seconds=cfg.window)
    at = stamp(now)
    turned = [(n, t) for n, t in state.turned if (parse_time(t) or now) >= since]
    turned += [(n, at) for n in sorted(unhealthy - state.unhealthy)]
    recent = len({n for n, _ in turned})
    tripped_at = state.tripped_at
    tripped = parse_time(tripped_at)
    if tripped and cfg.cooldown and now - tripped >= timedelta(seconds=cfg.cooldown):
        return Observation(reset(state, now, unhealthy), False, 0, cap)
    tripped_now = cfg.enabled and not tripped_at and recent > cap
    new = dataclasses.replace(
        state,
        unhealthy=unhealthy,
        turned=tuple(turned),
        tripped_at=at if tripped_now else tripped_at,
    )
    return Observation(new, tripped_now, recent, cap)


def reset(
    state: BreakerState, now: datetime, unhealthy: frozenset[str] | None = None
) -> BreakerState:
    """Close the breaker; the storm's transitions are forgotten, not replayed."""
    return BreakerState(
        primed=True,
        unhealthy=state.unhealthy if unhealthy is None else unhealthy,
        turned=(),
        tripped_at=None,
        reset_at=stamp(now),
    )


def reason(state: BreakerState) -> str | None:
    """Why automation is stopped (for budget.admit), or None when closed."""
    return f"circuit breaker open since {state.tripped_at}" if state.open else None


RECORD_KEY = "breaker"
"""The data key of the default profile breaker's :class:`Record` on the pause ConfigMap."""


def record_key(profile: str) -> str:
    """The data key of ``profile``'s breaker (``breaker``, or ``breaker.<profile>``)."""
    return RECORD_KEY if profile == "default" else f"{RECORD_KEY}.{profile}"


@dataclasses.dataclass(frozen=True)
class Record:
    """The breaker as kept on the pause ConfigMap: JSON a human can read with kubectl."""

    tripped_at: str | None = None  # None: closed
    nodes: tuple[str, ...] = ()  # the nodes whose turn tripped it
    reset_at: str | None = None
    reset_by: str | None = None

    @property
    def open(self) -> bool:
        return self.tripped_at is not None

    def encode(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def decode(cls, raw: str | None) -> Record | None:
        """None when absent or unreadable (an unreadable record never opens or resets anything)."""
        try:
            data = json.loads(raw) if raw else None
            if not isinstance(data, dict):
                return None
            tripped = data.get("tripped_at")
            return cls(
                tripped_at=str(tripped) if tripped else None,
                nodes=tuple(str(n) for n in data.get("nodes") or ()),
                reset_at=data.get("reset_at"),
                reset_by=data.get("reset_by"),
            )
        except (ValueError, TypeError):
            return None


def record_of(state: BreakerState, reset_by: str | None = None) -> Record:
    return Record(
        tripped_at=state.tripped_at,
        nodes=tuple(sorted({n for n, _ in state.turned})),
        reset_at=state.reset_at,
        reset_by=reset_by,
    )


def resume(record: Record | None) -> BreakerState:
    """The state to start from (after a restart or a leader change): open if the record
    says so. Not primed: the first observation takes the baseline."""
    if record is None or not record.open:
        return BreakerState(reset_at=record.reset_at if record else None)
    return BreakerState(tripped_at=record.tripped_at, reset_at=record.reset_at)


def reset_elsewhere(state: BreakerState, record: Record | None) -> bool:
    """True when ``state`` is open but the record no longer names its trip: someone reset it."""
    return state.open and record is not None and record.tripped_at != state.tripped_at


def closed_by(record: Record, now: datetime, who: str) -> Record:
    """The record after a human's reset (``fleetmedic breaker reset``)."""
    return Record(tripped_at=None, nodes=record.nodes, reset_at=stamp(now), reset_by=who)
