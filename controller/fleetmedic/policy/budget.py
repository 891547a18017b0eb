"""The safety gate between per-node decisions and doing them.

Every cycle the loop decides one action per node (ladder.decide), then passes
the lot through :func:`admit`, which holds back what the fleet-wide rules
forbid right now:

- pause (config, the pause ConfigMap) and an open circuit breaker hold all
  action; nothing is lost, the Nodes still say what is pending;
- outside every maintenance window, no new repair and nothing disruptive
  (drain, reinstall, reboot) starts;
- a new repair (``Action.new_work``) needs a free slot: at most
  ``max_concurrent`` nodes, and ``max_concurrent_percent`` of the pool (rounded
  down, at least one), hold repair work at once; and none starts while fewer
  than ``min_healthy`` nodes are healthy.

Work already under way keeps its slot until its episode ends, so a node is
never left half-repaired because others queued up behind it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime

from fleetmedic.model import keys
from fleetmedic.model.config import SafetyConfig, quantity_of
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy.actions import Action, Kind
from fleetmedic.policy.inflight import InFlight

WORKING_STEPS = tuple(s for s in REPAIR_STATES if s != "manual")
"""Rungs whose in-flight work holds a repair slot (every rung that runs playbooks)."""


@dataclasses.dataclass(frozen=True)
class Fleet:
    """The pool as the gate needs it."""

    size: int
    healthy: int
    active: frozenset[str]  # nodes holding a repair slot (in-flight reboot/reimage work)


@dataclasses.dataclass(frozen=True)
class Admission:
    admitted: tuple[Action, ...]
    held: tuple[tuple[Action, str], ...]  # (action, why not now)


def holds_slot(view: NodeView) -> bool:
    """In-flight reboot/reimage work; an unreadable marker counts (be conservative)."""
    try:
        fl = InFlight.decode(view.annotations.get(keys.ANN_IN_FLIGHT))
    except ValueError:
        return True
    return fl is not None and fl.step in WORKING_STEPS


def fleet_of(views: Iterable[NodeView]) -> Fleet:
    views = list(views)
    return Fleet(
        size=len(views),
        healthy=sum(1 for v in views if v.state == "healthy"),
        active=frozenset(v.name for v in views if holds_slot(v)),
    )


def slots(pool: int, cfg: SafetyConfig) -> int:
    by_share = max(1, int(pool * cfg.max_concurrent_percent / 100))
    return min(cfg.max_concurrent, by_share)


def min_healthy(pool: int, cfg: SafetyConfig) -> int:
    return quantity_of(cfg.min_healthy, pool, round_up=True)


def in_window(now: datetime, cfg: SafetyConfig) -> bool:
    return not cfg.maintenance_windows or any(w.contains(now) for w in cfg.maintenance_windows)


def admit(
    actions: Sequence[Action],
    fleet: Fleet,
    cfg: SafetyConfig,
    now: datetime,
    *,
    paused: str | None = None,
    breaker: str | None = None,
) -> Admission:
    """Split ``actions`` into what may run now and what waits (with the reason).

    ``paused``/``breaker``: why automation is stopped, or None. New work is admitted in
    the order given, so the caller decides fairness (e.g. longest-waiting first).
    """
    admitted: list[Action] = []
    held: list[tuple[Action, str]] = []
    free = slots(fleet.size, cfg) - len(fleet.active)
    need = min_healthy(fleet.size, cfg)
    window_open = in_window(now, cfg)
    stopped = paused or (cfg.pause and "paused by config (safety.pause)") or breaker
    for action in actions:
        if action.kind in (Kind.NONE, Kind.WAIT):
            continue
        if stopped:
            held.append((action, stopped))
        elif (action.new_work or action.disruptive) and not window_open:
            held.append((action, "outside the maintenance window"))
        elif action.new_work and action.node not in fleet.active:
            if fleet.healthy < need:
                held.append((action, f"only {fleet.healthy} healthy, min_healthy is {need}"))
            elif free <= 0:
                held.append(
                    (action, f"{len(fleet.active)} nodes in repair, limit {slots(fleet.size, cfg)}")
                )
            else:
                free -= 1
                admitted.append(action)
        else:
            admitted.append(action)
    return Admission(tuple(admitted), tuple(held))
