"""One cycle's plan: every node's next action, passed through the safety gate.

Pure: the controller loop, ``fleetmedic plan`` and the policy simulator in the unit tests
all call these, so what the tests simulate is what the controller does.

    decisions = decide_all(views, now, cfg)          # ladder.decide per node
    plan = make_plan(views, decisions, now, cfg)     # budget.admit over the lot
    plan.admission.admitted                          # what to start now
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import budget, ladder
from fleetmedic.policy.actions import Action, Kind

log = logging.getLogger(__name__)

Decision = tuple[NodeView, Action]


@dataclass(frozen=True)
class Plan:
    """One cycle's decisions: every node's next action and what the budget admits."""

    decisions: tuple[Decision, ...]
    admission: budget.Admission
    fleet: budget.Fleet

    def admitted_for(self, name: str) -> Action | None:
        return next((a for a in self.admission.admitted if a.node == name), None)

    @property
    def held(self) -> dict[str, str]:
        """Node -> why the gate held its action back."""
        return {a.node: why for a, why in self.admission.held}


def decide_all(
    views: Sequence[NodeView],
    now: datetime,
    cfg: Config,
    skip: Iterable[str] = (),
    memo: dict[str, Decision] | None = None,
) -> list[Decision]:
    """Every node's next action (nodes in ``skip`` left out).

    ``memo`` keeps NONE decisions across cycles: a NONE depends on the Node alone, never
    on the clock (ladder.decide says so and a property test holds it to that), so it
    stands while the node's view is the same object, i.e. the Node has not changed.
    A fleet of thousands of healthy nodes then costs a dict lookup per node per cycle.
    """
    skip = set(skip)
    decisions = []
    for v in views:
        if v.name in skip:
            continue
        if memo is not None:
            known = memo.get(v.name)
            if known is not None and known[0] is v:
                decisions.append(known)
                continue
        try:
            decision = (v, ladder.decide(v, now, cfg))
        except Exception:  # one odd Node must never stop the fleet's loop
            log.exception("%s: cannot decide; leaving it alone this cycle", v.name)
            continue
        decisions.append(decision)
        if memo is not None:
            if decision[1].kind == Kind.NONE:
                memo[v.name] = decision
            else:
                memo.pop(v.name, None)
    if memo is not None and len(memo) > len(views):
        present = {v.name for v in views}
        for gone in [name for name in memo if name not in present]:
            del memo[gone]
    return decisions


def actionable(decisions: Iterable[Decision]) -> bool:
    """True when some decision is more than NONE or WAIT (worth reading the pause switch)."""
    return any(a.kind not in (Kind.NONE, Kind.WAIT) for _, a in decisions)


def make_plan(
    views: Sequence[NodeView],
    decisions: Sequence[Decision],
    now: datetime,
    cfg: Config,
    *,
    busy_slots: Iterable[str] = (),
    paused: str | None = None,
    breaker_reason: str | None = None,
) -> Plan:
    """Pass the decisions through the budget (``views``: the whole pool).

    ``busy_slots``: nodes this process is working on that hold a repair slot even if
    their Node does not show it yet. New work is offered longest-waiting first.
    """
    fleet = budget.fleet_of(views)
    fleet = budget.Fleet(fleet.size, fleet.healthy, fleet.active | frozenset(busy_slots))
    pending = [(v, a) for v, a in decisions if a.kind not in (Kind.NONE, Kind.WAIT)]
    since = {v.name: v.annotations.get(keys.ANN_STATE_SINCE) or "" for v, _ in pending}
    actions = sorted(
        (a for _, a in pending),
        key=lambda a: (not a.new_work, since[a.node] if a.new_work else "", a.node),
    )
    admission = budget.admit(actions, fleet, cfg.safety, now, paused=paused, breaker=breaker_reason)
    return Plan(tuple(decisions), admission, fleet)
