"""The loop's parts share one lifecycle (controller/parts.py): a part appended to the
Controller's list is started, restored, asked what it works on before the Nodes are
read, observes each cycle, hears the plan and what the Recorder writes, is cancelled on a
lost lead and shut down in order, without a line of the loop naming it. The optional parts
make themselves from the config (``if_configured``)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from kubernetes import client

from fleetmedic.adapters.kube import Kube
from fleetmedic.controller.loop import Controller
from fleetmedic.controller.parts import Look, Part
from fleetmedic.model import keys
from fleetmedic.model.config import parse
from fleetmedic.model.nodestate import view
from fleetmedic.policy.actions import Update

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

    def written(self, upd, view) -> None:
        self.calls.append(f"written {upd.node}")

    def cancel(self) -> None:
        self.calls.append("cancel")

    def active(self) -> bool:
        return False

    def shutdown(self, grace: float) -> None:
        self.calls.append(f"shutdown {grace:g}")


def controller(**extra) -> Controller:
    cfg = parse(
        {
            "safety": {"min_healthy": 0, "breaker": {"enabled": False}, "pause_configmap": ""},
            "ansible": {"playbook_dir": "/pb"},
            **extra,
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


def test_what_the_recorder_writes_reaches_every_part_in_order():
    ctl = controller()
    calls: list[str] = []
    ctl.parts += [Recording(calls, set()), Recording(calls, set())]
    try:
        [v] = [view(node("a", "reboot"), ctl.cfg.vocabulary(), ctl.cfg.foreign())]
        ctl._written(Update(node="a", at="2026-11-21T12:00:00Z"), v)  # the Recorder's listener
    finally:
        ctl.workers.pool.shutdown(wait=False)
    assert calls == ["written a", "written a"]


BARE = ["nodes", "ladder", "chat", "domains", "breakers", "outbox", "tickets", "gpu-gauges"]


def test_the_optional_parts_make_themselves_from_the_config_in_their_place():
    bare = controller()
    full = controller(
        sweep={"every": "1h", "max_concurrent": 2},
        nvsentinel={"enabled": True},
        domains=[{"key": "nvidia.com/gpu.clique", "action": {"playbook": "fm.yml"}}],
    )
    try:
        assert [p.name for p in bare.parts] == [*BARE, "paperwork"]
        assert (bare.sweeper, bare.handoff, bare.domains.player) == (None, None, None)
        # the order of every hook: sweeps and the ladder's workers stop before the
        # paperwork; chat hears a write before NVSentinel's responder does
        assert [p.name for p in full.parts] == [
            "nodes",
            "sweep",
            "ladder",
            "chat",
            "nvsentinel",
            *BARE[3:],
            "paperwork",
        ]
        assert full.sweeper in full.parts and full.handoff in full.parts
        assert full.domains.player is not None
    finally:
        for ctl in (bare, full):
            ctl.workers.pool.shutdown(wait=False)
        full.sweeper.workers.pool.shutdown(wait=False)
