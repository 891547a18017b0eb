"""``restore``: put back the GPU partition layout the diagnose phase recorded (MIG
instances, AMD compute and memory partitions; playbooks/restore.yml, policy/partition.py)
and read it back. Where the record says the node had no partitions it is passed over
without a run. Part of the return gate: ``fleetmedic status`` shows it in capitals."""

from __future__ import annotations

from fleetmedic.policy import partition
from fleetmedic.policy.actions import Action, Outcome
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Metric, Next, Phase, Verdict
from fleetmedic.policy.phases.playbook import run_playbook, run_verdict
from fleetmedic.policy.steps import NodeCtx


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    return run_playbook(n, fl, resumed, partition.hostvars(n.view, fl.ep))


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    if outcome.ok:
        return Next((partition.restored_note(outcome.stdout),), outcome.run_id or fl.run_id)
    return run_verdict(n, fl, action, outcome)


def skip(n: NodeCtx, fl: InFlight) -> str | None:
    """Nothing to put back: passed over without a run (the rung costs what it did)."""
    return None if partition.needs_restore(n.view, fl.ep) else partition.skip_note(n.view, fl.ep)


PHASES = (
    Phase(
        partition.PHASE,
        act,
        complete,
        metric=Metric(
            "fleetmedic_partition_restores",
            "Restore phase runs (the GPU partition layout recorded before a repair put back "
            "and read back), by outcome (ok; failed: it differs, the rung fails); a node "
            "recorded without partitions runs none",
            "outcome",
            lambda outcome, update: outcome.status,
        ),
        status="RESTORE",
        skip=skip,
    ),
)
