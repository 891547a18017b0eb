"""``verify``: the same checks the agent runs (``fleetmedic check``, playbooks/verify.yml),
so a pass means what fencing meant; a step's attempt passes only through it (then the
return gate: phases/burnin.py, phases/quarantine.py). A pass also records the GPUs back in
service, by identity (policy/rmaflow.py's ``after_verify``: a repair's hold counts from
here)."""

from __future__ import annotations

from fleetmedic.policy import rmaflow
from fleetmedic.policy.actions import Action, Outcome
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Next, Phase, Verdict
from fleetmedic.policy.phases.playbook import run_playbook, run_verdict
from fleetmedic.policy.steps import NodeCtx


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    verdict = run_verdict(n, fl, action, outcome)
    if isinstance(verdict, Next):
        return rmaflow.after_verify(n, fl, outcome, verdict)
    return verdict


PHASES = (Phase("verify", lambda n, fl, resumed: run_playbook(n, fl, resumed), complete),)
