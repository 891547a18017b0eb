"""The return gate's second half: an opt-in burn-in before a repaired node returns.

Where the node's profile turns it on (``ladder.burnin.enabled``, per pool through a
profile's ``ladder``), a rung whose verify passed does not return the node yet: it enters a
``burnin`` phase (like quarantine's, not one of the rung's configured phases, so a ladder
without the gate runs exactly the actions it did) that runs playbooks/burnin.yml:
``fleetmedic diag --level N`` and a single-node all-reduce whose bus bandwidth is compared
with the node's hardware profile (``expected_busbw_gbps`` within its tolerance). A pass
returns the node (or goes on to quarantine); a fail, an unknown, a timeout climb the ladder
like a failed verify, with one line saying what was measured against what was expected. The
playbook's last output line (its JSON result) goes into the attempt's history; the role
keeps the same JSON beside the episode's evidence bundles, which the escalation email
attaches. A run interrupted by a controller restart runs again (it changes nothing).

Pure: deciding and wording only.
"""

from __future__ import annotations

import json
from typing import Any

from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.actions import Outcome

PHASE = "burnin"


def gates(cfg: Config, step: str) -> bool:
    """True when an attempt at ``step`` passes through the burn-in before it returns."""
    return cfg.ladder.burnin.enabled and step in cfg.ladder.rungs() and not _terminal(cfg, step)


def _terminal(cfg: Config, step: str) -> bool:
    return cfg.ladder.step(step).terminal


def hostvars(cfg: Config, view: NodeView) -> dict[str, Any]:
    """What playbooks/burnin.yml needs beyond the usual host variables: the level, and
    which hardware profile's figure (by name, or by the Node's label)."""
    b = cfg.ladder.burnin
    label = view.labels.get(b.hardware_label)
    return {
        "burnin_diag_level": b.diag_level,
        "burnin_hardware_profile": b.hardware_profile or "",
        "burnin_labels": [f"{b.hardware_label}={label}"] if label else [],
    }


def result(stdout: str) -> dict[str, Any] | None:
    """The role's JSON result line (the run's last output), or None."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) and "result" in data else None


def outcome_label(outcome: Outcome) -> str:
    """For fleetmedic_burnin_total: pass, fail or unknown as the role judged, else how the
    run ended (timeout, unreachable, failed before a result)."""
    data = result(outcome.stdout)
    if data is not None and data.get("result") in ("pass", "fail", "unknown"):
        return str(data["result"])
    return "pass" if outcome.ok else outcome.status


def summary(outcome: Outcome) -> str:
    """One line for the attempt's history: what the diagnostics said and the bus bandwidth
    measured against the expected one."""
    data = result(outcome.stdout)
    if outcome.ok:
        if data is None:
            return "burn-in passed"
        diag = data.get("diag") or {}
        coll = data.get("collective") or {}
        return (
            f"burn-in passed: diag level {diag.get('level', '?')} {diag.get('status', '?')}; "
            f"{coll.get('summary', 'no collective result')}"
        )
    if outcome.status == "failed" and outcome.message.startswith("burn-in"):
        return outcome.message  # the role's own line: measured against expected
    return f"burn-in {outcome.status}: {outcome.message}".rstrip(": ")
