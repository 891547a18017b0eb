"""The phase registry (policy/phases/): every phase a step may list is registered, the
ladder, the step rules, the controller's work and `fleetmedic status` dispatch through it
and name no phase, and a phase's metric and status text are what the controller shows."""

from __future__ import annotations

import re
from pathlib import Path

from fleetmedic.controller import status
from fleetmedic.controller.metrics import Metrics
from fleetmedic.model.config.ladder import PHASES as CONFIGURABLE
from fleetmedic.policy import phases

PACKAGE = Path(phases.__file__).resolve().parents[2]
DISPATCHERS = ("policy/ladder.py", "policy/steps.py", "policy/advance.py", "controller/work.py")
NAMED_PHASE = re.compile(  # (a state may share a rung's name: ``state="replace"``)
    r"""\.PHASE\b|RECORD_PHASE|(?<!state=)["'](diagnose|diagnostics|drain|drain_gpu|reset|reboot|"""
    r"""power_cycle|reinstall|restore|verify|burnin|quarantine|notify|replace)["']"""
)


def test_every_phase_a_step_may_list_is_registered_once():
    assert set(CONFIGURABLE) <= set(phases.PHASES)
    names = [p.name for m in phases.MODULES for p in m.PHASES]
    assert len(names) == len(set(names))
    assert [g.name for g in phases.GATES] == ["burnin", "quarantine"]
    assert all(g.gate is not None for g in phases.GATES)


def test_the_dispatchers_name_no_phase():
    found = [
        f"{name}:{n}: {line.strip()}"
        for name in DISPATCHERS
        for n, line in enumerate((PACKAGE / name).read_text().splitlines(), 1)
        if NAMED_PHASE.search(line.split("#")[0])
    ]
    assert found == []


def test_status_and_metrics_come_from_the_phases():
    assert status.GATE_PHASES == {"restore": "RESTORE", "burnin": "BURN-IN"}
    m = Metrics()
    counted = {p.metric.name for p in phases.metrics().values() if p.metric}
    assert counted == {
        "fleetmedic_partition_restores",
        "fleetmedic_burnin",
        "fleetmedic_diagnostics",
        "fleetmedic_quarantines",
    }
    exposed = {metric.name for metric in m.registry.collect()}
    assert counted <= exposed
    m.phases["burnin"].labels("pass").inc()
    assert m.registry.get_sample_value("fleetmedic_burnin_total", {"outcome": "pass"}) == 1


def test_gates_come_in_order_after_the_steps_phases():
    assert [g.name for g in phases.gates_after("verify")] == ["burnin", "quarantine"]
    assert [g.name for g in phases.gates_after("burnin")] == ["quarantine"]
    assert phases.gates_after("quarantine") == ()
