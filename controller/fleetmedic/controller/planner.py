"""One cycle's plan, and when to look again: the policy's ``decide_all`` and ``make_plan``
with what the loop's parts know (the breakers, the pause switch, the domain incidents).

The pause ConfigMap is read only when there is something to admit or a breaker is open
(to watch for a reset), so an idle fleet costs no API call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from fleetmedic.controller.breakerkeeper import Breakers
from fleetmedic.controller.parts import Look
from fleetmedic.controller.switches import SwitchReader
from fleetmedic.model.config import Config
from fleetmedic.policy import budget, domains
from fleetmedic.policy.actions import Kind
from fleetmedic.policy.plan import Decision, Plan, actionable, decide_all, make_plan

IDLE_WAKE = 60.0  # look at the fleet at least this often (cheap: no API call)
HELD_WAKE = 30.0  # while actions are held (pause ConfigMap, window), look this often


class Planner:
    def __init__(self, cfg: Config, switches: SwitchReader, breakers: Breakers) -> None:
        self.cfg, self.switches, self.breakers = cfg, switches, breakers
        self._settled: dict[str, Decision] = {}  # decide_all's memo

    def plan(self, look: Look, skip: set[str], incidents: domains.Review) -> Plan:
        """Every node's next action and what the budget admits; ``skip``: nodes with work
        under way or backed off (not decided this cycle)."""
        busy = look.busy
        slots = [n for n, a in busy.items() if a.new_work or a.step in budget.WORKING_STEPS]
        decisions = decide_all(
            look.views,
            look.now,
            self.cfg,
            skip=skip,
            memo=self._settled,
            assignment=look.assignment,
        )
        paused = None
        if actionable(decisions) or self.breakers.any_open():
            switches = self.switches.get()  # (an open breaker: watch for a reset)
            paused = switches.paused
            self.breakers.adopt_resets(switches, look.now)
        return make_plan(
            look.views,
            decisions,
            look.now,
            self.cfg,
            busy_slots=slots,
            paused=paused,
            breaker_reason=self.breakers.reasons(),
            assignment=look.assignment,
            holds=domains.holds(incidents),
            count_once=domains.grouped(incidents),
        )


def next_look(
    plan: Plan,
    incidents: domains.Review,
    backoff: Mapping[str, float],
    now: datetime,
    mono: float,
) -> float:
    """Seconds until it is worth looking again: a domain's window settling, a back-off
    ending, a WAIT's ``not_before``, or held actions."""
    wait = IDLE_WAKE
    settle = domains.next_due(incidents, now)
    if settle is not None:
        wait = min(wait, settle + 0.05)
    if backoff:
        wait = min(wait, min(backoff.values()) - mono)
    for _, a in plan.decisions:
        if a.kind == Kind.WAIT and a.not_before is not None:
            wait = min(wait, (a.not_before - now).total_seconds() + 0.05)
    if plan.admission.held:
        wait = min(wait, HELD_WAKE)
    return wait


class DecisionLog:
    """Each node's decision logged when it changes (not every cycle), on ``log``."""

    def __init__(self, log: logging.Logger, dry_run: bool) -> None:
        self.log, self.dry_run = log, dry_run
        self._said: dict[str, str] = {}  # last decision logged per node

    def said(self, plan: Plan) -> None:
        held = plan.held
        for _, a in plan.decisions:
            if a.kind == Kind.NONE and a.reason == "healthy":
                self._said.pop(a.node, None)
                continue
            line = a.describe() + (f" [held: {held[a.node]}]" if a.node in held else "")
            if self.dry_run and plan.admitted_for(a.node):
                line = "dry run, would do: " + line
            if self._said.get(a.node) != line:
                self._said[a.node] = line
                self.log.info("%s", line)
