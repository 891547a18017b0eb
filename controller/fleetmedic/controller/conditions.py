"""Writing fleetmedic's NodeCondition (policy/condition.py) after the controller, or a human's
``release``/``reset``, changed a Node.

Best effort by design: the condition mirrors what the taints and annotations already record,
so a failed write is logged and retried at the node's next change, never a reason to fail
the step that changed it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.errors import FleetmedicError
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.condition import wanted

log = logging.getLogger(__name__)


def publish(cluster: Cluster, view: NodeView, now: datetime | None = None) -> bool:
    """Write the condition ``view`` should carry, if it differs; True if one was written."""
    cond = wanted(view, now or datetime.now(UTC))
    if cond is None:
        return False
    try:
        cluster.set_node_condition(view.name, cond)
    except FleetmedicError as exc:
        log.warning("%s: condition %s not written: %s", view.name, cond["reason"], exc)
        return False
    return True
