"""The safety net, visible: how many driver errors no rule knows a node logged, and the last.

Pure: the agent keeps the state in its Node annotation ``fleetmedic.io/monitor-counts``
(the ``net`` part), calls :func:`add` for each unclassified finding and writes the
result back; ``fleetmedic status`` shows ``n`` and ``last`` per node. It never fences: a
line no rule knows is counted for people to see, not for a threshold we cannot source.

State (plain JSON)::

    {"boot": "<boot id>/<segment>", "n": 4, "c": "uptime", "t": 1843.3,
     "rule": "amdgpu.unclassified", "last": "amdgpu 0000:c5:00.0: amdgpu: ...", "at": "..."}

Replay-safe: the agent reads the current boot's log again after a restart; an occurrence
at or before ``t`` (its own log time, on clock ``c``) was counted already. Lines closer
than ``burst`` seconds to the last counted one are the same event (a storm of one new
message). A new boot starts from zero.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

MAX_LAST = 200
"""Characters of the last line kept (the annotation stays small)."""


@dataclasses.dataclass(frozen=True)
class Added:
    state: dict[str, Any]
    changed: bool


def clean(state: Any, boot: str) -> dict[str, Any]:
    """``state`` as this module writes it, or a fresh one (another boot, or malformed)."""
    if not isinstance(state, Mapping) or state.get("boot") != boot:
        return {"boot": boot, "n": 0}
    out: dict[str, Any] = {"boot": boot, "n": 0}
    n = state.get("n")
    out["n"] = int(n) if isinstance(n, int) and n >= 0 else 0
    t = state.get("t")
    if isinstance(t, (int, float)):
        out["t"] = float(t)
        out["c"] = str(state.get("c", ""))
    for key in ("rule", "last", "at"):
        if isinstance(state.get(key), str):
            out[key] = state[key]
    return out


def add(
    state: Any,
    *,
    boot: str,
    when: float,
    clock: str,
    rule: str,
    message: str,
    at: str,
    burst: float = 10.0,
) -> Added:
    """Count one unclassified finding at ``when`` (on ``clock``)."""
    fresh = clean(state, boot)
    last = fresh.get("t")
    if last is not None and fresh.get("c") == clock and when <= last + burst:
        return Added(fresh, False)  # read before (a replay) or the same event
    fresh.update(
        n=fresh["n"] + 1,
        t=when,
        c=clock,
        rule=rule,
        last=" ".join(message.split())[:MAX_LAST],
        at=at,
    )
    return Added(fresh, True)


def summary(state: Any) -> tuple[int, str]:
    """``(count, last line)`` for display; ``(0, "")`` when there is none."""
    if not isinstance(state, Mapping):
        return 0, ""
    n = state.get("n")
    last = state.get("last")
    return (int(n) if isinstance(n, int) else 0, str(last) if isinstance(last, str) else "")
