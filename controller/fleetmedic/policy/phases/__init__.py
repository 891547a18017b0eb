"""The phase registry: every phase an attempt can be in, one module each (policy/phase.py
says what a phase declares). ladder.py, advance.py, controller/work.py (the metrics) and
controller/status.py iterate over it; none of them names a phase.

==============  ==================================================================
module          phases
==============  ==================================================================
evidence        ``diagnose``: the evidence and the partition layout before a repair
diagnostics     ``diagnostics``: the diagnose state's vendor diagnostics
drain           ``drain``, ``drain_gpu``
repair          ``reset``, ``reboot``, ``power_cycle``, ``reinstall`` (probe: the
                boot-id probe of those that boot the node)
restore         ``restore``: the GPU partition layout put back (return gate)
verify          ``verify``
burnin          ``burnin``: the return gate's burn-in, after verify
quarantine      ``quarantine``: the return gate's deep diagnostics, last
notify          ``notify``: the replace rung's notice
replace         ``replace``: the hand-off to the cloud
==============  ==================================================================

Adding a phase (docs/architecture.md): its module here and one line in :data:`MODULES`
(and, for a gate phase, its place in :data:`GATES`), its name in model/config/ladder.py's
``Phase`` with its playbook's settings, its playbook and its tests.
"""

from __future__ import annotations

from fleetmedic.policy.phase import Phase
from fleetmedic.policy.phases import (
    burnin,
    diagnostics,
    drain,
    evidence,
    notify,
    quarantine,
    repair,
    replace,
    restore,
    verify,
)
from fleetmedic.policy.steps import NodeCtx

MODULES = (
    evidence,
    diagnostics,
    drain,
    repair,
    restore,
    verify,
    burnin,
    quarantine,
    notify,
    replace,
)
PHASES: dict[str, Phase] = {p.name: p for m in MODULES for p in m.PHASES}
GATES: tuple[Phase, ...] = (burnin.PHASES[0], quarantine.PHASES[0])
"""The return gate's phases, in order: after a step's last phase, each that is due runs
before the node returns to service."""


def of(name: str) -> Phase:
    """The phase ``name`` (KeyError: not a phase; the config allows only known ones)."""
    return PHASES[name]


def gates_after(name: str) -> tuple[Phase, ...]:
    """The gate phases still to come after ``name`` (all of them after a step's phases)."""
    names = [g.name for g in GATES]
    return GATES[names.index(name) + 1 :] if name in names else GATES


def timeout(n: NodeCtx, name: str) -> float:
    """How long phase ``name`` may take (its own, else its playbook's, else the job's)."""
    phase = PHASES.get(name)
    if phase is not None and phase.timeout is not None:
        return phase.timeout(n)
    return n.playbook_timeout(name)


def statuses() -> dict[str, str]:
    """Phase -> what ``fleetmedic status`` shows in capitals while it runs."""
    return {p.name: p.status for p in PHASES.values() if p.status}


def metrics() -> dict[str, Phase]:
    """Phase -> the phase, for those with a metric (controller/metrics.py makes them)."""
    return {name: p for name, p in PHASES.items() if p.metric is not None}
