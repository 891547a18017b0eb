"""NVSentinel's responder joins the loop as one of its parts (controller/parts.py), and
the loop's plan leaves alone the nodes NVSentinel still works on (one owner at a time):
the planner holds them, with or without the hand-off, whenever NVSentinel is known."""

from __future__ import annotations

from kubernetes import client

from fleetmedic.adapters.kube import Kube
from fleetmedic.controller.handoff import Responder
from fleetmedic.controller.loop import Controller
from fleetmedic.controller.parts import Look
from fleetmedic.model import keys
from fleetmedic.model.config import parse
from fleetmedic.model.nodestate import view
from fleetmedic.policy.actions import Update
from fleetmedic.policy.profiles import assign
from tests.unit.controller.test_parts import NOW, NOWHERE, node

STATE = "dgxc.nvidia.com/nvsentinel-state"


def controller(**extra) -> Controller:
    cfg = parse(
        {
            "safety": {
                "min_healthy": 0,
                "max_concurrent": 10,
                "max_concurrent_percent": 100,
                "breaker": {"enabled": False},
                "pause_configmap": "",
            },
            "ansible": {"playbook_dir": "/pb"},
            **extra,
        }
    )
    kube = Kube(client.ApiClient(client.Configuration(host=NOWHERE)), NOWHERE)
    return Controller(cfg, kube, dry_run=True, clock=lambda: NOW)


def test_the_responder_is_a_part_only_when_the_hand_off_is_on():
    assert not any(isinstance(p, Responder) for p in controller().parts)
    ctl = controller(nvsentinel={"enabled": True})
    try:
        names = [p.name for p in ctl.parts]
        assert ctl.handoff is not None and ctl.handoff in ctl.parts
        # after the ladder's workers (a repair records its end first), before the paperwork
        assert names.index("ladder") < names.index("nvsentinel") < names.index("paperwork")
        ctl.handoff._poked.clear()
        ctl.handoff.observe(Look(NOW, [], assign([], ctl.cfg), {}, {}))
        assert ctl.handoff._poked.is_set(), "each cycle of the loop wakes its worker"
        ctl.handoff._poked.clear()
        answer = Update(node="a", at="2026-11-21T12:00:00Z", annotations={keys.ANN_HANDOFF: "r"})
        [v] = [view(node("a", "reboot"), ctl.cfg.vocabulary(), ctl.cfg.foreign())]
        ctl._written(answer, v)  # (the Recorder's listener: each of the loop's parts hears it)
        assert ctl.handoff._poked.is_set(), "a write that answers a request wakes its worker"
    finally:
        ctl.workers.pool.shutdown(wait=False)


def test_run_once_waits_for_the_pass_a_claimed_node_s_write_owes():
    """A rung of a claimed node ended (the Recorder's write): its request may be due to
    complete, so the responder is active (``run --once`` waits) until a pass takes no
    step, which wakes the loop; a pass that took a step owes another."""
    ctl = controller(nvsentinel={"enabled": True})
    r = ctl.handoff
    assert r is not None
    woken: list[bool] = []
    r._wake_loop = lambda: woken.append(True)
    try:
        answer = Update(node="a", at="2026-11-21T12:00:00Z", annotations={keys.ANN_HANDOFF: "r"})
        [v] = [view(node("a", "reboot"), ctl.cfg.vocabulary(), ctl.cfg.foreign())]
        ctl._written(answer, v)
        assert not r.active(), "a dry run (as here) never waits: it acts on nothing"
        r.acting = lambda: True
        assert r.active()
        r.step_all = lambda: 1  # a step taken (the request completed): the next may be due
        r.one_pass()
        assert r.active() and not woken
        r.step_all = lambda: 0  # nothing left to do
        r.one_pass()
        assert not r.active() and woken == [True]
    finally:
        ctl.workers.pool.shutdown(wait=False)


def plan_of(ctl: Controller, nodes: list[dict]):
    for n in nodes:
        ctl.watcher.put(n)
    views = ctl.views()
    look = Look(NOW, views, assign(views, ctl.cfg), {}, {})
    try:
        return ctl.planner.plan(look, set(), ctl.domains.last)
    finally:
        ctl.workers.pool.shutdown(wait=False)


def test_the_plan_holds_a_node_nvsentinel_still_works_on():
    theirs, ours = node("a", "reboot"), node("b", "reboot")
    theirs["metadata"]["labels"][STATE] = "draining"
    plan = plan_of(controller(nvsentinel={"enabled": True}), [theirs, ours])
    assert plan.held == {"a": f"NVSentinel is working on it ({STATE}=draining)"}
    assert [a.node for a in plan.admission.admitted] == ["b"]


def test_with_its_signals_alone_drain_succeeded_is_where_nvsentinel_ends():
    done, working = node("a", "reboot"), node("b", "reboot")
    done["metadata"]["labels"][STATE] = "drain-succeeded"
    working["metadata"]["labels"][STATE] = "quarantined"
    plan = plan_of(controller(foreign_signals=["nvsentinel"]), [done, working])
    assert set(plan.held) == {"b"}
    assert [a.node for a in plan.admission.admitted] == ["a"]
    # without NVSentinel in the config, its label means nothing to us
    plan = plan_of(controller(), [node("c", "reboot"), working])
    assert plan.held == {} and len(plan.admission.admitted) == 2
