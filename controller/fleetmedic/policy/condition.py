"""fleetmedic's own NodeCondition, ``FleetmedicRepair``: its verdict where other tools look.

node-problem-detector + Draino setups, the cluster autoscaler, dashboards and
``kubectl describe node`` read conditions, not our taints and annotations. So:

- ``True`` while the node is on the ladder; the reason names the rung (``Reboot``,
  ``Reimage``, ``Manual``, ...), the message what fenced it;
- ``False`` once it is back in service, reason ``Repaired`` (a verified repair) or
  ``Released`` (a human's ``release``/``reset``); the message says how.

A node fleetmedic never acted on carries no condition. Pure: the controller writes what
:func:`wanted` returns when it differs (status or reason) from what the node carries.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.actions import HEALTHY
from fleetmedic.policy.history import RELEASED, decode, stamp

MESSAGE_MAX = 1024  # a condition message is for people; the evidence stays on annotations


def wanted(view: NodeView, now: datetime) -> dict[str, Any] | None:
    """The condition ``view`` should carry, or None when it is right as it stands."""
    if view.state == HEALTHY:
        if view.condition is None:
            return None  # never ours to speak of
        status, reason, message = "False", *_back(view)
    else:
        status, reason = "True", _camel(view.state)
        finding = view.annotations.get(keys.ANN_LAST_FINDING) or view.annotations.get(
            keys.ANN_ENTERED_BY
        )
        message = f"on the repair ladder at {view.state}" + (f": {finding}" if finding else "")
    if view.condition == (status, reason):
        return None
    at = stamp(now)
    cond = {
        "type": keys.CONDITION,
        "status": status,
        "reason": reason,
        "message": message[:MESSAGE_MAX],
        "lastHeartbeatTime": at,
    }
    if view.condition is None or view.condition[0] != status:
        cond["lastTransitionTime"] = at  # (a rung change keeps the time it went True)
    return cond


def _back(view: NodeView) -> tuple[str, str]:
    history = decode(view.annotations.get(keys.ANN_HISTORY))
    last = history[-1] if history else None
    if last is None:
        return "Repaired", "back in service"
    if last.result == RELEASED:
        return "Released", f"back in service: {last.message or 'released by a human'}"
    how = f"{last.step} {last.result}" + (f" ({last.message})" if last.message else "")
    return "Repaired", f"back in service after {how}"


def _camel(state: str) -> str:
    return "".join(part.capitalize() for part in state.split("_"))
