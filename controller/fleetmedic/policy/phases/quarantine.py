"""``quarantine``: deep diagnostics with a recommendation (policy/quarantine.py), in the
return gate after a step's verify (and burn-in), when a human asked for it or the node is
repaired again for the same fault within the window. Its recommendation is kept in its
annotation (the request is answered): return to service passes the repair; replace climbs
to the pool's terminal step (``replace`` where the ladder has it, else ``manual``, whose
email carries the diagnostics); unknown stays fenced for a human."""

from __future__ import annotations

from fleetmedic.model import keys
from fleetmedic.policy import quarantine
from fleetmedic.policy.actions import Action, Event, Kind, Outcome, Update
from fleetmedic.policy.history import FAIL, short, stamp
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Metric, Phase, Verdict
from fleetmedic.policy.phases.playbook import hostvars
from fleetmedic.policy.rungs import MANUAL
from fleetmedic.policy.steps import NodeCtx, again, ctx, into, returned


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    q = n.cfg.ladder.quarantine
    return n.action(
        Kind.RUN,
        f"{fl.step} passed verify: quarantine, level {q.level} diagnostics and the "
        f"fabric checks{again(resumed)}",
        playbook=str(n.cfg.ansible.playbook_dir / q.playbook),
        timeout=q.timeout,
        hostvars={**hostvars(n.view, fl, n.step_cfg(fl.step).phases), "quarantine_level": q.level},
        resumed=resumed,
        **ctx(fl),
    )


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    q = n.cfg.ladder.quarantine
    result = quarantine.judge(outcome.status, outcome.stdout, outcome.message)
    why = next((x[len("quarantine: ") :] for x in fl.notes if x.startswith("quarantine: ")), "")
    note = quarantine.record(result, q.level, stamp(n.now), outcome.run_id or "", why)
    ann: dict[str, str | None] = {keys.ANN_QUARANTINE: note, keys.ANN_QUARANTINE_REQUEST: None}
    said = f"quarantine level {q.level}: {result.recommendation}: {result.summary}"
    if result.recommendation == quarantine.RETURN:
        return returned(n, fl, short(f"{fl.step} attempt {fl.attempt} passed; {said}"), ann)
    nxt = "replace" if result.recommendation == quarantine.REPLACE else MANUAL
    if nxt not in n.cfg.ladder.order:
        nxt = MANUAL
    mark = n.attempt(fl, FAIL, said, outcome.run_id)
    return n.update(
        state=nxt,
        append=(mark,),
        annotations={**ann, keys.ANN_IN_FLIGHT: n.first(fl.ep, nxt, 1).encode()},
        events=(Event("QuarantineFailed", short(f"{said}; next: {nxt}"), "Warning"),),
    )


def due(n: NodeCtx) -> str | None:
    """Why this return to service is held for quarantine (None: it is not)."""
    who = quarantine.requested(n.view)
    if who is not None:
        return f"requested by {who}"
    q = n.cfg.ladder.quarantine
    fault = quarantine.fault_of(n.view)
    if q.enabled and quarantine.due(n.history, fault, n.now, q.count, q.window):
        return quarantine.reason(fault, q.count, q.window)
    return None


def gate(n: NodeCtx, fl: InFlight) -> Update | None:
    why = due(n)
    if why is None:
        return None
    entered = into(n, fl, quarantine.PHASE, notes=(*fl.notes, f"quarantine: {why}"))
    return n.update(
        annotations={keys.ANN_IN_FLIGHT: entered.encode()},
        events=(Event("Quarantined", short(f"{fl.step} passed verify; {why}")),),
    )


PHASES = (
    Phase(
        quarantine.PHASE,
        act,
        complete,
        timeout=lambda n: n.cfg.ladder.quarantine.timeout,
        metric=Metric(
            "fleetmedic_quarantines",
            "Quarantine rung runs judged, by recommendation "
            "(return-to-service, replace, unknown: the node stays fenced for a human)",
            "recommendation",
            lambda outcome, update: quarantine.recommendation_of(
                update.annotations.get(keys.ANN_QUARANTINE) if update else None
            ),
        ),
        gate=gate,
    ),
)
