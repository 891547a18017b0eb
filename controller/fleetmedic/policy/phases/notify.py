"""``notify``: the replace rung's notice (the email, and chat, that the node is being
replaced, with its evidence) while the Node and its annotations still exist. Held: the
pool's day of replacements is spent (checked before the email, so no notice says "being
replaced" of a node that then waits a day). A failed send is tried again later, never
skipped: after the hand-off the Node and its evidence are gone."""

from __future__ import annotations

from datetime import timedelta

from fleetmedic.model import keys
from fleetmedic.policy.actions import Action, Event, Kind, Outcome
from fleetmedic.policy.history import short, stamp
from fleetmedic.policy.inflight import PENDING, InFlight
from fleetmedic.policy.phase import Next, Phase, Verdict
from fleetmedic.policy.steps import NodeCtx, again, ctx, held

NAME = "notify"


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    return n.action(
        Kind.ESCALATE,
        f"{fl.step}: tell the team the node is being replaced{again(resumed)}",
        resumed=resumed,
        **ctx(fl),
    )


def complete(n: NodeCtx, fl: InFlight, action: Action, outcome: Outcome) -> Verdict:
    if outcome.status == "held":
        return held(n, fl, outcome)
    if outcome.ok or outcome.status == "skipped":
        note = () if outcome.ok else (f"notice not emailed: {outcome.message}",)
        told = Event("RepairReplacing", f"{fl.step}: handing the node to the cloud", "Warning")
        return Next(note, events=(told,))
    retry = n.now + timedelta(seconds=n.cfg.smtp.retry_interval if n.cfg.smtp else 300)
    wait = fl.with_(status=PENDING, since=stamp(n.now), retry_at=stamp(retry))
    return n.update(
        annotations={keys.ANN_IN_FLIGHT: wait.encode()},
        events=(Event("EscalationEmailFailed", short(outcome.message), "Warning"),),
    )


PHASES = (Phase(NAME, act, complete),)
