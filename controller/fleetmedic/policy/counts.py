"""Monitor findings that add up: occurrences per (rule, GPU) in a window, replay-safe.

Pure: the agent reads the state from its Node annotation ``fleetmedic.io/monitor-counts``,
calls :func:`add` for one occurrence and writes the result back in the same update.
The state is plain JSON::

    {"boot": "<boot id>",
     "seen": {"xid.13|0000:cb:00": {"c": "uptime", "t": [812.4, 901.0], "f": 0}}}

- ``t``: the times (on clock ``c``, as the log wrote them) of the occurrences still
  inside the window;
- ``f``: the floor: occurrences at or before it (or within ``burst`` after it: the
  same event) were counted into a threshold that already fenced the node, and are never
  counted again.

Why a restart neither forgets nor double-counts: the counts live on the Node, and an
occurrence is identified by its own log time, so the same line read again after a
restart (the agent re-reads the current boot from its start) lands within ``burst``
of a time already kept, or at or below the floor, and changes nothing. Lines closer
than ``burst`` seconds are one event (an Xid storm, a reset's begin/MODE2/succeeded
lines). A new boot starts from zero. Known gap: a line without a timestamp is
timed by the agent's clock, so its replay would count again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

MAX_KEYS = 256
"""(rule, GPU) pairs kept; beyond this the oldest are forgotten."""


@dataclasses.dataclass(frozen=True)
class Limit:
    count: int
    window: float
    burst: float = 10.0


@dataclasses.dataclass(frozen=True)
class Added:
    state: dict[str, Any]
    changed: bool  # write the state back
    crossed: bool  # this occurrence reached the count: fence now
    count: int  # occurrences in the window after this one


def key_of(rule: str, pci: str | None) -> str:
    return f"{rule}|{pci or ''}"


def _clean(state: Any, boot: str) -> dict[str, Any]:
    if not isinstance(state, Mapping) or state.get("boot") != boot:
        return {"boot": boot, "seen": {}}
    seen = state.get("seen")
    out: dict[str, Any] = {}
    if isinstance(seen, Mapping):
        for key, entry in seen.items():
            if not isinstance(entry, Mapping):
                continue
            times = [float(t) for t in entry.get("t", ()) if isinstance(t, (int, float))]
            floor = entry.get("f", None)
            out[str(key)] = {
                "c": str(entry.get("c", "")),
                "t": times,
                "f": float(floor) if isinstance(floor, (int, float)) else None,
            }
    return {"boot": boot, "seen": out}


def add(state: Any, *, boot: str, key: str, when: float, clock: str, limit: Limit) -> Added:
    """Count one occurrence of ``key`` at ``when`` (on ``clock``) against ``limit``."""
    fresh = _clean(state, boot)
    seen = fresh["seen"]
    entry = seen.get(key)
    if entry is None or entry["c"] != clock:  # times on another clock cannot be compared
        entry = {"c": clock, "t": [], "f": None}
    floor = entry["f"]
    newest = max(entry["t"], default=None)
    times = [t for t in entry["t"] if t > when - limit.window]
    too_old = newest is not None and when <= newest - limit.window  # outside any window we keep
    if (
        too_old
        # the floor's own burst was counted with it (a line folded into the crossing
        # event, read again once the kept times are gone, is not a new occurrence)
        or (floor is not None and when <= floor + limit.burst)
        or any(abs(t - when) <= limit.burst for t in times)
    ):
        return Added(fresh, False, False, len(times))
    times.append(when)
    times.sort()
    crossed = limit.count > 0 and len(times) >= limit.count
    if crossed:
        entry = {"c": clock, "t": [], "f": max(times)}
    else:
        entry = {"c": clock, "t": times[-max(limit.count, 1) :], "f": floor}
    seen[key] = entry
    if len(seen) > MAX_KEYS:
        oldest = sorted(seen, key=lambda k: max(seen[k]["t"] or [seen[k]["f"] or 0.0]))
        for old in oldest[: len(seen) - MAX_KEYS]:
            del seen[old]
    return Added(fresh, True, crossed, len(times))


def to_json(state: Mapping[str, Any]) -> dict[str, Any]:
    """The annotation's value (floors only where set; times exactly as counted, so a
    replayed line compares equal)."""
    seen = {
        k: {
            "c": v["c"],
            "t": list(v["t"]),
            **({"f": v["f"]} if v["f"] is not None else {}),
        }
        for k, v in state["seen"].items()
    }
    return {"boot": state["boot"], "seen": seen}
