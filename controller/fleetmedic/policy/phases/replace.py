"""``replace``: hand the node to its cloud (delete the Node for its provisioner, or
terminate its instance through its Auto Scaling group: playbooks/replace.yml) and end its
life: no verify follows. Done, held by the day's limit (wait), or failed (climb: a human
looks at a node the cloud would not take)."""

from __future__ import annotations

from fleetmedic.policy.actions import Action, Kind, Outcome
from fleetmedic.policy.history import FAIL
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.phase import Fail, Next, Phase, Verdict
from fleetmedic.policy.phases.playbook import hostvars
from fleetmedic.policy.steps import (
    RESULT_OF,
    NodeCtx,
    again,
    ctx,
    failure_text,
    held,
)

NAME = "replace"


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    cfg = n.cfg
    return n.action(
        Kind.REPLACE,
        f"{fl.step} attempt {fl.attempt}: hand the node to the cloud{again(resumed)}",
        playbook=str(cfg.playbook_path(cfg.ladder.playbooks.replace)),
        timeout=n.playbook_timeout(NAME),
        hostvars=hostvars(n.view, fl, n.step_cfg(fl.step).phases),
        resumed=resumed,
        disruptive=True,
        **ctx(fl),
    )


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    if outcome.ok:
        return Next((outcome.message,) if outcome.message else ())
    if outcome.status == "held":
        return held(n, fl, outcome)
    return Fail(
        RESULT_OF.get(outcome.status, FAIL), failure_text(fl.phase, outcome), outcome.run_id
    )


PHASES = (Phase(NAME, act, complete),)
