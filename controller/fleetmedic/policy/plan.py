"""One cycle's plan: every node's next action, passed through the safety gate.

Pure: the controller loop, ``fleetmedic plan`` and the policy simulator in the unit tests
all call these, so what the tests simulate is what the controller does.

    decisions = decide_all(views, now, cfg)          # ladder.decide per node
    plan = make_plan(views, decisions, now, cfg)     # budget.admit over the lot
    plan.admission.admitted                          # what to start now

Each node is decided with its profile's config (policy/profiles.py), and each profile's
actions pass through that profile's budget, windows and breaker; the top level's
``safety.min_healthy`` also holds for the whole fleet. Without profiles everything is the
``default`` profile, i.e. the top level.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from fleetmedic.model import keys
from fleetmedic.model.config import DEFAULT_PROFILE, Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import budget, ladder
from fleetmedic.policy.actions import Action, Kind
from fleetmedic.policy.profiles import Assignment, assign

log = logging.getLogger(__name__)

Decision = tuple[NodeView, Action]


@dataclass(frozen=True)
class Plan:
    """One cycle's decisions: every node's next action and what the budget admits."""

    decisions: tuple[Decision, ...]
    admission: budget.Admission
    fleet: budget.Fleet
    assignment: Assignment

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
    assignment: Assignment | None = None,
) -> list[Decision]:
    """Every node's next action (nodes in ``skip`` left out), decided with its profile's
    config and tagged with the profile (``Action.profile``).

    ``memo`` keeps NONE decisions across cycles: a NONE depends on the Node alone, never
    on the clock (ladder.decide says so and a property test holds it to that), so it
    stands while the node's view is the same object, i.e. the Node has not changed.
    A fleet of thousands of healthy nodes then costs a dict lookup per node per cycle.
    """
    skip = set(skip)
    assignment = assignment or assign(views, cfg)
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
            decision = (v, _decide(v, now, cfg, assignment))
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


def _decide(v: NodeView, now: datetime, cfg: Config, assignment: Assignment) -> Action:
    profile = assignment.profile_of.get(v.name)
    if profile is None:
        picks = " and ".join(assignment.conflicts.get(v.name, ()))
        return Action(Kind.NONE, v.name, f"left alone: selected by profiles {picks}")
    action = ladder.decide(v, now, cfg.profile(profile))
    return replace(action, profile=profile) if profile != action.profile else action


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
    breaker_reason: str | Mapping[str, str | None] | None = None,
    assignment: Assignment | None = None,
    holds: Mapping[str, str] | None = None,
    count_once: Mapping[str, str] | None = None,
) -> Plan:
    """Pass the decisions through the budget (``views``: the whole pool).

    ``busy_slots``: nodes this process is working on that hold a repair slot even if
    their Node does not show it yet. New work is offered longest-waiting first.
    ``breaker_reason``: why the breaker stops automation, for every profile (a string)
    or per profile (a mapping). ``holds``: node -> why its actions wait (domain incidents,
    policy/domains.py). ``count_once``: node -> the domain incident whose nodes count as
    one against min_healthy (nodes in repair only: domains.grouped).
    """
    assignment = assignment or assign(views, cfg)
    busy = frozenset(busy_slots)
    fleet = _fleet(views, busy, count_once)
    pending = [(v, a) for v, a in decisions if a.kind not in (Kind.NONE, Kind.WAIT)]
    held: list[tuple[Action, str]] = []
    if holds:
        held = [(a, holds[a.node]) for _, a in pending if a.node in holds]
        pending = [(v, a) for v, a in pending if a.node not in holds]
    since = {v.name: v.annotations.get(keys.ANN_STATE_SINCE) or "" for v, _ in pending}
    actions = sorted(
        (a for _, a in pending),
        key=lambda a: (not a.new_work, since[a.node] if a.new_work else "", a.node),
    )
    admitted: list[Action] = []
    for name in cfg.profile_names():
        members = assignment.nodes_of(name)
        theirs = [a for a in actions if a.node in members]
        if not theirs:
            continue
        why_breaker = (
            breaker_reason.get(name) if isinstance(breaker_reason, Mapping) else breaker_reason
        )
        # a busy node no longer in the pool (deleted mid-run) still holds a default slot
        busy_here = frozenset(
            n for n in busy if assignment.profile_of.get(n, DEFAULT_PROFILE) == name
        )
        pool = (
            fleet  # one pool: its fleet is the whole fleet (computed once: 5,000 views)
            if len(members) == fleet.size and busy_here == busy
            else _fleet(
                [v for v in views if v.name in members],
                busy_here,
                {n: g for n, g in (count_once or {}).items() if n in members},
            )
        )
        part = budget.admit(
            theirs,
            pool,
            cfg.profile(name).safety,
            now,
            paused=paused,
            breaker=why_breaker,
        )
        admitted += part.admitted
        held += part.held
    if cfg.profiles:  # with one profile, its own min_healthy is the fleet's already
        admitted, held = _fleet_min_healthy(admitted, held, fleet, cfg)
    return Plan(tuple(decisions), budget.Admission(tuple(admitted), tuple(held)), fleet, assignment)


def _fleet(
    views: Sequence[NodeView], busy: frozenset[str], count_once: Mapping[str, str] | None = None
) -> budget.Fleet:
    fleet = budget.fleet_of(views)
    healthy = fleet.healthy
    if count_once:  # a domain incident's sick nodes (all in `views`) count as one sick node
        healthy += len(count_once) - len(set(count_once.values()))
    return budget.Fleet(fleet.size, healthy, fleet.active | busy)


def _fleet_min_healthy(
    admitted: list[Action], held: list[tuple[Action, str]], fleet: budget.Fleet, cfg: Config
) -> tuple[list[Action], list[tuple[Action, str]]]:
    """The top level's min_healthy over the whole fleet: no new repair below it."""
    need = budget.min_healthy(fleet.size, cfg.safety)
    if fleet.healthy >= need:
        return admitted, held
    why = f"fleet-wide: only {fleet.healthy} healthy, min_healthy is {need}"
    stopped = [a for a in admitted if a.new_work and a.node not in fleet.active]
    return [a for a in admitted if a not in stopped], held + [(a, why) for a in stopped]
