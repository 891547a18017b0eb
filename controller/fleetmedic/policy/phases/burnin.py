"""``burnin``: the return gate's burn-in (policy/burnin.py: diagnostics and the single-node
collective test against the hardware profile), after a step's verify where
``ladder.burnin`` asks for it. Passed: on to the return (or quarantine), its line in the
history; anything else (too slow, a diagnostic failed, unknown, timed out) fails the
attempt with the role's line, measured against expected, and the ladder climbs."""

from __future__ import annotations

from fleetmedic.model import keys
from fleetmedic.policy import burnin
from fleetmedic.policy.actions import Action, Kind, Outcome, Update
from fleetmedic.policy.history import FAIL
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Fail, Metric, Next, Phase, Verdict
from fleetmedic.policy.phases.playbook import hostvars
from fleetmedic.policy.steps import RESULT_OF, NodeCtx, again, ctx, into


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    b = n.cfg.ladder.burnin
    return n.action(
        Kind.RUN,
        f"{fl.step} passed verify: burn-in, level {b.diag_level} diagnostics and the "
        f"collective test{again(resumed)}",
        playbook=str(n.cfg.ansible.playbook_dir / b.playbook),
        timeout=b.timeout_for(fl.step),
        hostvars={
            **hostvars(n.view, fl, n.step_cfg(fl.step).phases),
            **burnin.hostvars(n.cfg, n.view),
        },
        resumed=resumed,
        **ctx(fl),
    )


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    said = burnin.summary(outcome)
    if outcome.ok:
        return Next((said,), outcome.run_id or fl.run_id)
    return Fail(RESULT_OF.get(outcome.status, FAIL), said, outcome.run_id)


def gate(n: NodeCtx, fl: InFlight) -> Update | None:
    if not burnin.gates(n.cfg, fl.step):
        return None
    return n.update(annotations={keys.ANN_IN_FLIGHT: into(n, fl, burnin.PHASE).encode()})


def dropped(n: NodeCtx, fl: InFlight) -> str | None:
    if burnin.gates(n.cfg, fl.step):
        return None
    return f"{fl.step}: the burn-in was turned off meanwhile; verify passed"


PHASES = (
    Phase(
        burnin.PHASE,
        act,
        complete,
        timeout=lambda n: n.cfg.ladder.burnin.timeout_for(n.view.state),
        metric=Metric(
            "fleetmedic_burnin",
            "Burn-in runs before a repaired node returns (ladder.burnin: diagnostics and the "
            "single-node all-reduce against the hardware profile), by outcome (pass; fail: too "
            "slow, a test failed; unknown; timeout, unreachable); none where it is off",
            "outcome",
            lambda outcome, update: burnin.outcome_label(outcome),
        ),
        status="BURN-IN",
        gate=gate,
        dropped=dropped,
        passed=" and the burn-in",
    ),
)
