"""The repair verbs: ``reset`` (the GPUs), ``reboot``, ``power_cycle`` (through the BMC) and
``reinstall`` (the vendor's driver or ROCm). Each runs the playbook of its name
(``ladder.playbooks``), disturbs the node's work (a maintenance window holds it), and the
ones that boot the node read its boot id first (phases/probe.py)."""

from __future__ import annotations

from fleetmedic.model.config.ladder import BOOTING_PHASES
from fleetmedic.policy.actions import Action, Kind, Outcome
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Phase, Verdict
from fleetmedic.policy.phases import probe
from fleetmedic.policy.phases.playbook import run_playbook, run_verdict
from fleetmedic.policy.steps import NodeCtx


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    if fl.phase in BOOTING_PHASES and probe.wanted(fl, resumed):
        return probe.act(n, fl, resumed)
    return run_playbook(n, fl, resumed, disruptive=True)


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    if action.kind == Kind.PROBE:
        return probe.complete(n, fl, outcome)
    return run_verdict(n, fl, action, outcome)


PHASES = tuple(
    Phase(name, act, complete) for name in ("reset", "reboot", "power_cycle", "reinstall")
)
