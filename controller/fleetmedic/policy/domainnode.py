"""What a node carries about its domain incidents: the ``fleetmedic.io/domain-incidents``
annotation (the last few incidents it was in, open and closed), written by the controller
(controller/domainkeeper.py) and read by ``fleetmedic status`` and ``history`` and the
dynamic inventory's ``incident_<key>_<value>`` groups. Pure: strings in, strings out.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fleetmedic.model import keys
from fleetmedic.policy.domains import Incident, name_of

ANN_INCIDENTS = keys.PREFIX + "domain-incidents"
"""On each node of an incident: the incidents it was in (the last few, open and closed),
for `fleetmedic history`, `status` and the inventory's ``incident_<key>_<value>`` groups."""
NODE_RECORDS = 5


def on_node(raw: str | None) -> list[dict[str, Any]]:
    """A node's :data:`ANN_INCIDENTS` entries (malformed: none)."""
    try:
        data = json.loads(raw) if raw else []
    except ValueError:
        return []
    return (
        [d for d in data if isinstance(d, dict) and d.get("id")] if isinstance(data, list) else []
    )


def node_entry(raw: str | None, inc: Incident) -> str:
    """The node's :data:`ANN_INCIDENTS` value with ``inc`` recorded (added, or its entry
    updated when it closed); the oldest entries go first past :data:`NODE_RECORDS`."""
    entries = [e for e in on_node(raw) if e.get("id") != inc.id]
    entry = {"id": inc.id, "key": inc.key, "value": inc.value, "opened_at": inc.opened_at}
    if inc.closed_at:
        entry.update(closed_at=inc.closed_at, closed_by=inc.closed_by or "", why=inc.why)
    else:
        entry["why"] = inc.why
    return json.dumps([*entries, entry][-NODE_RECORDS:], sort_keys=True, separators=(",", ":"))


def open_on_node(raw: str | None) -> list[dict[str, Any]]:
    """The open incidents a node's annotation names."""
    return [e for e in on_node(raw) if not e.get("closed_at") and e.get("key") and e.get("value")]


def timeline_rows(raw: str | None) -> list[dict[str, Any]]:
    """A node's incidents as ``fleetmedic history`` rows (controller/timeline.py's shape):
    one when each opened and one when it closed."""
    rows: list[dict[str, Any]] = []
    for e in on_node(raw):
        name = name_of(str(e.get("key")), str(e.get("value")))
        row = {"source": "domain", "by": "fleetmedic", "run_id": None}
        rows.append(
            {
                **row,
                "at": e.get("opened_at", ""),
                "what": f"domain incident {name}",
                "result": "opened",
                "message": str(e.get("why") or ""),
            }
        )
        if e.get("closed_at"):
            rows.append(
                {
                    **row,
                    "at": e["closed_at"],
                    "what": f"domain incident {name}",
                    "result": f"closed ({e.get('closed_by') or '?'})",
                    "message": str(e.get("why") or ""),
                }
            )
    return rows


def inventory_group(key: str, value: str) -> str:
    """The dynamic inventory's group of an open incident's nodes: ``incident_<key>_<value>``
    with every character Ansible does not allow in a group name as ``_``."""
    return "incident_" + re.sub(r"[^A-Za-z0-9_]", "_", f"{key}_{value}")
