"""A node's whole story for ``fleetmedic history NODE``: the attempts kept in its history
annotation and the Events posted about it (fleetmedic's, the agent's, anyone's), merged
and newest first. Pure: the Node and the Events in, rows out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fleetmedic.model import keys
from fleetmedic.policy.history import decode


def timeline(node: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Rows ``{at, source, what, result, message, by, run_id}``, newest first."""
    ann = (node.get("metadata") or {}).get("annotations") or {}
    rows: list[dict[str, Any]] = []
    for a in decode(ann.get(keys.ANN_HISTORY)):
        where = f" at {a.phase}" if a.phase else ""
        rows.append(
            {
                "at": a.end or a.start,
                "source": "history",
                "what": f"episode {a.ep}: {a.step} attempt {a.attempt}{where}",
                "result": a.result,
                "message": a.message,
                "by": "fleetmedic",
                "run_id": a.run_id,
            }
        )
    for e in events:
        src = e.get("source") or {}
        rows.append(
            {
                "at": e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "",
                "source": "event",
                "what": e.get("reason") or "",
                "result": e.get("type") or "",
                "message": " ".join(str(e.get("message") or "").split()),
                "by": e.get("reportingComponent") or src.get("component") or "",
                "run_id": None,
            }
        )
    # RFC 3339 UTC strings sort as times; an event's whole-second stamp before a history
    # entry's of the same second (the history entry is written first, then its Events)
    rows.sort(key=lambda r: (str(r["at"])[:19], r["source"] == "history"), reverse=True)
    return rows


def render(rows: list[dict], width: int = 200) -> str:
    if not rows:
        return "no history"
    lines = []
    for r in rows:
        run = f" [run {r['run_id']}]" if r.get("run_id") else ""
        text = f"{str(r['at'])[:19].replace('T', ' ')}  {r['by'][:18]:<18}  {r['what']}: "
        text += f"{r['result']}{run}" + (f": {r['message']}" if r["message"] else "")
        lines.append(text[:width])
    return "\n".join(lines)
