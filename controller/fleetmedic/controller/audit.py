"""The audit trail: every action fleetmedic takes on a node, as one JSON line on the
``fleetmedic.audit`` logger (who, what, why, run id, outcome) and as an Event on the Node.

The Node's history annotation is capped (``ladder.history_limit``) and holds attempts,
not every drain or email; the audit lines are the complete record, for the journal or
a log pipeline (``journalctl -u fleetmedic -o cat | grep '"audit"'`` gives JSON only).
``fleetmedic history NODE`` merges the annotation and the Node's Events.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from fleetmedic import logcontext
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.policy.actions import Action, Kind, Outcome

log = logging.getLogger("fleetmedic.audit")

WHAT = {
    Kind.RUN: "run",
    Kind.PROBE: "probe",
    Kind.DRAIN: "drain",
    Kind.ESCALATE: "email",
    Kind.REPLACE: "replace",
}


def record(
    who: str,
    node: str,
    what: str,
    why: str,
    outcome: str,
    *,
    run_id: str | None = None,
    cluster: Cluster | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Log one audit line (and post it as an Event when ``cluster`` is given); returns it."""
    line = {
        "audit": True,
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "who": who,
        "node": node,
        "what": what,
        "why": why,
        "run_id": run_id,
        "outcome": outcome,
        **{
            k: v for k, v in {"cluster": logcontext.CLUSTER.get(), **extra}.items() if v is not None
        },
    }
    log.info("%s", json.dumps(line, sort_keys=True))
    if cluster is not None:
        detail = f" (run {run_id})" if run_id else ""
        cluster.post_event(
            {"metadata": {"name": node}},
            "FleetmedicAction",
            f"{what}: {outcome}{detail}: {why}",
            "Normal" if outcome in ("ok", "skipped", "written") else "Warning",
        )
    return line


def of_action(
    who: str, action: Action, outcome: Outcome, run_id: str | None, cluster: Cluster | None
) -> dict[str, Any]:
    """The audit line of an executed action (a playbook phase, a drain, a probe, an email)."""
    what = WHAT.get(action.kind, str(action.kind))
    if action.kind == Kind.RUN and action.phase:
        what = action.phase  # reboot, reinstall, reset, diagnose, verify ...
    return record(
        who,
        action.node,
        what,
        action.reason,
        outcome.status,
        run_id=outcome.run_id or run_id,
        cluster=cluster,
        step=action.step,
        episode=action.ep or None,
        profile=action.profile,
        message=outcome.message or None,
    )
