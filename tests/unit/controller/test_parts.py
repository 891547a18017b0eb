"""The loop's parts share one lifecycle (controller/parts.py): a part appended to the
Controller's list is started, restored, asked what it works on before the Nodes are
read, observes each cycle, hears the plan, is cancelled on a lost lead and shut down in
order, without a line of the loop naming it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from kubernetes import client

from fleetmedic.adapters.kube import Kube
from fleetmedic.controller.loop import Controller
from fleetmedic.controller.parts import Look, Part
from fleetmedic.model import keys
from fleetmedic.model.config import parse

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
NOWHERE = "https://127.0.0.1:9"  # nothing listens: a dry run never calls it


def node(name: str, state: str | None = None) -> dict:
    taints = [{"key": "fleetmedic.io/repair", "value": state, "effect": "NoSchedule"}]
    return {
        "metadata": {"name": name, "labels": {keys.LABEL_VENDOR: "nvidia"}, "resourceVersion": "1"},
        "spec": {"taints": taints if state else []},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.7"}]},
    }


class Recording(Part):
    name = "recording"

    def __init__(self, calls: list[str], works_on: set[str]) -> None:
        self.calls, self.works_on = calls, works_on
        self.looks: list[Look] = []
        self.skipped: set[str] = set()

    def start(self, stop: threading.Event) -> None:
        self.calls.append("start")

    def restore(self) -> None:
        self.calls.append("restore")

    def working(self) -> set[str]:
        self.calls.append("working")
        return self.works_on

    def observe(self, look: Look) -> None:
        self.calls.append("observe")
        self.looks.append(look)

    def planned(self, look, plan, skip) -> None:
        self.calls.append("planned")
        self.skipped = skip

    def cancel(self) -> None:
        self.calls.append("cancel")

    def active(self) -> bool:
        return False

    def shutdown(self, grace: float) -> None:
        self.calls.append(f"shutdown {grace:g}")


def controller() -> Controller:
    cfg = parse(
        {
            "safety": {"min_healthy": 0, "breaker": {"enabled": False}, "pause_configmap": ""},
            "ansible": {"playbook_dir": "/pb"},
        }
    )
    kube = Kube(client.ApiClient(client.Configuration(host=NOWHERE)), NOWHERE)
    return Controller(cfg, kube, dry_run=True, clock=lambda: NOW)


def test_a_part_added_to_the_list_takes_part_in_every_cycle():
    ctl = controller()
    calls: list[str] = []
    mine = Recording(calls, works_on={"b"})
    ctl.parts.append(mine)
    for n in (node("a", "reboot"), node("b", "reboot"), node("c")):
        ctl.watcher.put(n)
    plans = []
    real = ctl.planner.plan

    def plan(look, skip, incidents):
        plans.append((skip, real(look, skip, incidents)))
        return plans[-1][1]

    ctl.planner.plan = plan  # type: ignore[method-assign]
    try:
        ctl.restore()
        ctl.cycle()
    finally:
        ctl.workers.pool.shutdown(wait=False)
    assert calls == ["restore", "working", "observe", "planned"]
    [look] = mine.looks
    assert [v.name for v in look.views] == ["a", "b", "c"]
    assert look.working["recording"] == {"b"}
    [(skip, made)] = plans
    assert "b" in skip  # what a part works on is not the ladder's this cycle
    assert {a.node for _, a in made.decisions} == {"a", "c"}
    assert "a" in mine.skipped  # the plan admitted it (a dry run only says so)


def test_lost_lead_and_shutdown_reach_every_part_in_order():
    ctl = controller()
    calls: list[str] = []
    ctl.parts.append(Recording(calls, set()))
    ctl._on_lost()
    ctl.shutdown(grace=0.5)
    assert calls == ["cancel", "shutdown 0.5"]
    names = [p.name for p in ctl.parts]
    assert names.index("ladder") < names.index("paperwork")  # work recorded before Events
    assert names.index("domains") < names.index("breakers")  # (no incident is stale)
