"""``diagnostics``: the diagnose state's phase (the mildest fence) that runs the vendor's
diagnostics on the fenced node (``fleetmedic diag``: DCGM or RVS at
``ladder.diagnose_level``, through the quarantine's playbook), judged by
policy/diagnose.py: passed, on to verify (whose pass returns the node untouched); failed
or unknown, into the ladder at the rung ``diagnose.rung_after`` gives, the attempt failed
with what the tools said."""

from __future__ import annotations

from fleetmedic.model import keys
from fleetmedic.policy import diagnose, sweep
from fleetmedic.policy.actions import Action, Event, Outcome
from fleetmedic.policy.history import FAIL, short
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Metric, Next, Phase, Verdict
from fleetmedic.policy.phases.playbook import run_playbook
from fleetmedic.policy.steps import NodeCtx


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    return run_playbook(n, fl, resumed, diagnose.hostvars(n.cfg))


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    v = diagnose.verdict(outcome)
    said = diagnose.summary(n.cfg, v)
    if v.result == sweep.PASS:
        return Next((said,), outcome.run_id or fl.run_id)
    rung = diagnose.rung_after(n.cfg, v)
    mark = n.attempt(fl, FAIL, said, outcome.run_id)
    reason = "DiagnosticsFailed" if v.result == sweep.FAIL else "DiagnosticsUnknown"
    return n.update(
        state=rung,
        append=(mark,),
        annotations={keys.ANN_IN_FLIGHT: n.first(fl.ep, rung, 1).encode()},
        events=(Event(reason, short(f"{said}; next: {rung}"), "Warning"),),
    )


PHASES = (
    Phase(
        diagnose.PHASE,
        act,
        complete,
        metric=Metric(
            "fleetmedic_diagnostics",
            "Diagnose state runs of the vendor diagnostics judged, by result (pass: on to "
            "verify and back untouched; fail: into the rung the failed test maps to; "
            "unknown: into the first repair rung)",
            "result",
            lambda outcome, update: diagnose.verdict(outcome).result,
        ),
    ),
)
