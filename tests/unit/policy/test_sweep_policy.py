"""Diagnostic sweeps (policy/sweep.py): which idle nodes, when, how many; what a run means;
the writes that start and end a sweep."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policysim import T0, config, make_node

from fleetmedic.model import keys
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy import sweep
from fleetmedic.policy.profiles import assign

V = preset("default")
MAINT = V.maintenance.as_taint()


def cfg(**sw):
    return config(
        sweep={"every": "6h", "max_concurrent": 2, **sw},
        safety={"max_concurrent": 10, "max_concurrent_percent": 100, "min_healthy": 0},
    )


def views_of(nodes):
    return [view(n, V) for n in nodes]


def swept_at(when, result="pass"):
    return {keys.ANN_LAST_SWEEP: sweep.LastSweep(when, result).encode()}


def plan_for(c, nodes, **kw):
    vs = views_of(nodes)
    return sweep.plan(vs, T0, c, assign(vs, c), **{"gpu_busy": (), **kw})


def test_vocabulary_has_a_maintenance_taint_of_its_own():
    assert MAINT == {"key": "fleetmedic.io/maintenance", "value": "sweep", "effect": "NoSchedule"}
    assert V.is_ours(MAINT) and V.repair_state_of([MAINT]) is None
    assert preset("ossci").maintenance.key == "maintenance-sweep"


def test_only_idle_due_nodes_at_most_n_oldest_first():
    nodes = [make_node(f"n{i}") for i in range(6)]
    nodes[3]["metadata"]["annotations"] = swept_at("2026-11-21T11:00:00Z")  # 1 h ago: not due
    nodes[4]["metadata"]["annotations"] = swept_at("2026-11-21T01:00:00Z")  # 11 h ago: due
    p = plan_for(cfg(), nodes, gpu_busy={"n0", "n1"})
    # never-swept first (n2, n5), then the oldest; the busy ones and n3 never
    assert [n for n, _ in p.start] == ["n2", "n5"]
    p = plan_for(cfg(max_concurrent=5), nodes, gpu_busy={"n0", "n1"})
    assert [n for n, _ in p.start] == ["n2", "n5", "n4"]


def test_running_sweeps_take_their_slots():
    nodes = [make_node(f"n{i}") for i in range(4)]
    nodes[0]["spec"]["taints"] = [MAINT]
    p = plan_for(cfg(), nodes, sweeping={"n0"})
    assert [n for n, _ in p.start] == ["n1"] and not p.release


def test_orphaned_maintenance_taints_are_released_even_when_paused():
    nodes = [make_node("n0", taints=[MAINT]), make_node("n1")]
    p = plan_for(cfg(), nodes, paused="paused by ConfigMap")
    assert p.release == ("n0",) and not p.start and "paused" in p.held["default"]
    # ... but never one this process is sweeping, or one it is otherwise working on
    assert not plan_for(cfg(), nodes, sweeping={"n0"}).release
    assert not plan_for(cfg(), nodes, skip={"n0"}).release


@pytest.mark.parametrize(
    "node",
    [
        make_node(
            "x", taints=[{"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}]
        ),
        make_node("x", unschedulable=True),
        make_node(
            "x",
            taints=[{"key": "fleetmedic.io/slow-network", "value": "true", "effect": "NoSchedule"}],
        ),
        make_node(
            "x",
            taints=[{"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"}],
        ),
    ],
    ids=["in-repair", "cordoned", "slow-network", "foreign-signal"],
)
def test_nodes_not_plainly_healthy_are_never_swept(node):
    c = cfg()
    vs = [view(node, V, c.foreign())]
    assert not sweep.plan(vs, T0, c, assign(vs, c), gpu_busy=()).start


def test_a_node_nvsentinel_works_on_is_not_swept_before_its_cordon_lands():
    c = config(
        sweep={"every": "6h", "max_concurrent": 2},
        safety={"max_concurrent": 10, "max_concurrent_percent": 100, "min_healthy": 0},
        nvsentinel={"enabled": True},
    )
    nodes = [make_node("n0"), make_node("n1")]
    nodes[0]["metadata"]["labels"]["dgxc.nvidia.com/nvsentinel-state"] = "quarantined"
    assert [n for n, _ in plan_for(c, nodes).start] == ["n1"]
    assert [n for n, _ in plan_for(cfg(), nodes).start] == ["n0", "n1"]  # NVSentinel unknown


def test_windows_pause_breaker_and_budget_hold_sweeps():
    nodes = [make_node(f"n{i}") for i in range(4)]
    # T0 is a Saturday noon
    shut = cfg(windows=[{"start": "01:00", "end": "05:00"}])
    assert plan_for(shut, nodes).held == {"default": "outside the sweep windows"}
    assert plan_for(cfg(windows=[{"start": "11:00", "end": "13:00"}]), nodes).start
    assert not plan_for(cfg(), nodes, breakers={"default": "breaker open"}).start
    # the repair budget: 2 slots, one node in repair -> one sweep
    tight = config(
        sweep={"max_concurrent": 5},
        safety={"max_concurrent": 2, "max_concurrent_percent": 100, "min_healthy": 0},
    )
    nodes[3]["metadata"]["annotations"] = {
        keys.ANN_IN_FLIGHT: json.dumps(
            {"step": "reboot", "attempt": 1, "phase": "reboot", "status": "running", "ep": 1}
        )
    }
    nodes[3]["spec"]["taints"] = [V.repair("reboot").as_taint()]
    assert len(plan_for(tight, nodes).start) == 1
    # min_healthy: 4 nodes, 3 must stay healthy -> one sweep at most
    healthy = config(
        sweep={"max_concurrent": 5},
        safety={"max_concurrent": 10, "max_concurrent_percent": 100, "min_healthy": 3},
    )
    assert len(plan_for(healthy, [make_node(f"h{i}") for i in range(4)]).start) == 1


def test_no_sweep_section_or_disabled_profile_sweeps_nothing():
    nodes = [make_node("a", labels={"pool": "x"}), make_node("b")]
    assert not plan_for(config(), nodes)
    c = config(
        sweep={"max_concurrent": 2},
        profiles=[{"name": "xpool", "selector": "pool=x", "sweep": {"enabled": False}}],
    )
    assert [n for n, _ in plan_for(c, nodes).start] == ["b"]
    assert c.sweeps() and not config().sweeps()


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 12),
    busy=st.sets(st.integers(0, 11)),
    limit=st.integers(1, 4),
    ages=st.lists(st.one_of(st.none(), st.integers(0, 12)), min_size=12, max_size=12),
)
def test_never_more_than_n_never_busy_never_undue(n, busy, limit, ages):
    nodes = []
    for i in range(n):
        ann = swept_at(f"2026-11-21T{12 - ages[i]:02d}:00:00Z") if ages[i] is not None else {}
        nodes.append(make_node(f"n{i}", annotations=ann))
    p = plan_for(cfg(max_concurrent=limit), nodes, gpu_busy={f"n{i}" for i in busy})
    started = [name for name, _ in p.start]
    assert len(started) <= limit and len(set(started)) == len(started)
    vs = {v.name: v for v in views_of(nodes)}
    for name in started:
        assert int(name[1:]) not in busy
        assert sweep.due(vs[name], T0, 6 * 3600)


def test_due_at_most_once_per_period():
    v = view(make_node("n", annotations=swept_at("2026-11-21T06:00:01Z")), V)
    assert not sweep.due(v, T0, 6 * 3600)
    assert sweep.due(v, T0 + timedelta(seconds=1), 6 * 3600)
    bad = view(make_node("n", annotations={keys.ANN_LAST_SWEEP: "garbage"}), V)
    assert sweep.due(bad, T0, 6 * 3600)


def gpu_pod(resource="nvidia.com/gpu", phase="Running", where="limits", init=False):
    box = {"name": "c", "resources": {where: {resource: "1"}}}
    spec = {"initContainers" if init else "containers": [box]}
    return {"spec": spec, "status": {"phase": phase}}


def test_wants_gpu():
    assert sweep.wants_gpu(gpu_pod())
    assert sweep.wants_gpu(gpu_pod("amd.com/gpu", where="requests"))
    assert sweep.wants_gpu(gpu_pod(init=True))
    assert not sweep.wants_gpu(gpu_pod(phase="Succeeded"))
    assert not sweep.wants_gpu(gpu_pod("cpu"))
    assert not sweep.wants_gpu({"spec": {"containers": [{"name": "c"}]}})


PASS = {"name": "diag.dcgm", "status": "ok", "summary": "level 2: 12 tests passed"}
FAIL = {
    "name": "diag.dcgm",
    "status": "problem",
    "summary": "level 2: SM Stress failed on GPU 1",
    "action": "reimage",
    "evidence": {"failed": [{"name": "SM Stress", "gpus": [1], "status": "fail"}]},
}


def test_judge():
    assert sweep.judge("ok", json.dumps(PASS)).result == sweep.PASS
    v = sweep.judge("failed", "warning line\n" + json.dumps(FAIL), "SM Stress failed")
    assert (v.result, v.rung, v.tests[0]["name"]) == (sweep.FAIL, "reimage", "SM Stress")
    no_action = {**FAIL, "action": None}
    assert sweep.judge("failed", json.dumps(no_action)).rung == sweep.DEFAULT_RUNG
    assert sweep.judge("ok", json.dumps({**PASS, "status": "unknown"})).result == sweep.UNKNOWN
    assert sweep.judge("unreachable", "", "ssh: no route").result == sweep.UNKNOWN
    assert sweep.judge("timeout", "not json").result == sweep.UNKNOWN


def test_begin_edit_only_on_a_healthy_schedulable_node():
    node = make_node("n")
    assert sweep.begin_edit(node, V) and node["spec"]["taints"] == [MAINT]
    assert not sweep.begin_edit(node, V)  # already on
    assert not sweep.begin_edit(make_node("n", unschedulable=True), V)
    assert not sweep.begin_edit(make_node("n", taints=[V.repair("reboot").as_taint()]), V)


def test_record_edit_pass_busy_and_fail():
    other = {"key": "example.com/x", "value": "y", "effect": "NoSchedule"}
    node = make_node("n", taints=[other, MAINT])
    assert sweep.record_edit(node, V, None, "2026-11-21T12:00:00Z", 2)
    assert (
        node["spec"]["taints"] == [other]
        and keys.ANN_LAST_SWEEP not in node["metadata"]["annotations"]
    )

    node = make_node("n", taints=[MAINT])
    verdict = sweep.judge("ok", json.dumps(PASS))
    sweep.record_edit(node, V, verdict, "2026-11-21T12:00:00Z", 2, "run-1")
    last = sweep.LastSweep.of(view(node, V))
    assert last and (last.result, last.run, last.at) == ("pass", "run-1", "2026-11-21T12:00:00Z")
    assert node["spec"]["taints"] == []

    node = make_node("n", taints=[MAINT])
    node["metadata"]["annotations"][keys.ANN_LAST_RESULTS] = json.dumps({"gpu": {"status": "ok"}})
    verdict = sweep.judge("failed", json.dumps(FAIL))
    sweep.record_edit(node, V, verdict, "2026-11-21T12:00:00Z", 2, "run-2")
    v = view(node, V)
    assert v.state == "reimage" and not v.maintenance
    finding = v.annotation_json(keys.ANN_LAST_FINDING)
    assert finding["kind"] == "diag" and finding["tests"][0]["gpus"] == [1]
    assert "SM Stress" in finding["summary"] and finding["run"] == "run-2"
    results = v.annotation_json(keys.ANN_LAST_RESULTS)
    assert results["gpu"] == {"status": "ok"} and results["diag"]["status"] == "problem"
