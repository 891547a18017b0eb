"""``diagnose``: capture the evidence (playbooks/diagnose.yml) before a repair may wipe it,
and record the GPU partition layout the restore phase puts back (policy/partition.py), and
the GPUs by identity: a GPU the lemon rule calls an RMA candidate goes to its case
(policy/rmaflow.py, phases/rma.py) instead of the step's next phase.

Evidence capture is best effort: a failed diagnose must not block the repair. A node that
does not answer fails the rungs that need SSH at once (the ladder climbs), but not those
that act around the node: power_cycle's BMC reaches a hung node (and keeps the event log
as evidence), and replace's cloud takes a dead instance as it is."""

from __future__ import annotations

from fleetmedic.policy import partition, rmaflow
from fleetmedic.policy.actions import Action, Outcome
from fleetmedic.policy.history import stamp
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Next, Phase, Verdict
from fleetmedic.policy.phases import probe
from fleetmedic.policy.phases.playbook import run_playbook, run_verdict
from fleetmedic.policy.steps import NodeCtx

OUT_OF_BAND = ("power_cycle", "replace")  # rungs whose action does not need the node's SSH


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    hung_ok = fl.step in OUT_OF_BAND and outcome.status in ("unreachable", "timeout")
    if not (outcome.ok or outcome.status == "failed" or hung_ok):
        return run_verdict(n, fl, action, outcome)
    note = () if outcome.ok else (f"diagnose {outcome.status}: {outcome.message}",)
    # the layout before the repair, kept on the Node for the restore phase
    record = partition.record_from(n.view, fl.ep, outcome.stdout, stamp(n.now))
    # the GPUs by identity (the lemon rule): an RMA candidate goes to its case instead
    # the boot id before any boot of this attempt: its booting phase needs no probe run
    boot_id = probe.published(outcome, n.view.name)
    passed = Next(note, outcome.run_id or fl.run_id, record, boot_id=boot_id)
    return rmaflow.after_diagnose(n, fl, outcome, passed)


PHASES = (
    Phase(
        partition.RECORD_PHASE,
        lambda n, fl, resumed: run_playbook(n, fl, resumed),
        complete,
    ),
)
