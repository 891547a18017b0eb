"""The controller's pure parts: planning a cycle, status rows, host variables, escalation
reasons. The loop itself runs end to end in tests/integration/test_controller_e2e.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fleetmedic.controller.execute import escalation_reason
from fleetmedic.controller.status import last_finding, node_status, render_status
from fleetmedic.model import keys
from fleetmedic.model.config import parse
from fleetmedic.model.hostvars import WITHHELD, controller_host_vars, host_groups, safe_address
from fleetmedic.model.nodestate import view
from fleetmedic.policy.actions import Action
from fleetmedic.policy.history import Attempt, encode
from fleetmedic.policy.plan import actionable, decide_all, make_plan

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
CFG = parse(
    {
        "safety": {
            "max_concurrent": 1,
            "max_concurrent_percent": 100,
            "min_healthy": 0,
            "breaker": {"enabled": False},
        },
        "ansible": {"playbook_dir": "/pb"},
    }
)


def node(name, state=None, annotations=None, address="192.0.2.7"):
    taints = (
        [{"key": "fleetmedic.io/repair", "value": state, "effect": "NoSchedule"}] if state else []
    )
    return {
        "metadata": {
            "name": name,
            "labels": {keys.LABEL_VENDOR: "nvidia"},
            "annotations": dict(annotations or {}),
            "resourceVersion": "1",
        },
        "spec": {"taints": taints},
        "status": {"addresses": [{"type": "InternalIP", "address": address}]},
    }


def views(*nodes):
    return [view(n, CFG.vocabulary(), CFG.foreign()) for n in nodes]


def test_new_work_waits_for_a_slot_held_by_a_busy_worker():
    vs = views(node("a", "reboot"), node("b", "reboot"))
    decisions = decide_all(vs, NOW, CFG)
    assert actionable(decisions)
    free = make_plan(vs, decisions, NOW, CFG)
    assert [a.node for a in free.admission.admitted] == ["a"]  # one slot, name order
    busy = make_plan(vs, decisions, NOW, CFG, busy_slots=["x"])
    assert not busy.admission.admitted and "limit 1" in busy.admission.held[0][1]


def test_longest_waiting_node_gets_the_slot_first():
    vs = views(
        node("a", "reboot", {keys.ANN_STATE_SINCE: "2026-11-21T11:59:00Z"}),
        node("b", "reboot", {keys.ANN_STATE_SINCE: "2026-11-21T10:00:00Z"}),
    )
    plan = make_plan(vs, decide_all(vs, NOW, CFG), NOW, CFG)
    assert [a.node for a in plan.admission.admitted] == ["b"]


def test_pause_holds_everything():
    vs = views(node("a", "reboot"))
    plan = make_plan(vs, decide_all(vs, NOW, CFG), NOW, CFG, paused="paused by ConfigMap x/y")
    assert not plan.admission.admitted and plan.admission.held[0][1] == "paused by ConfigMap x/y"


def test_healthy_fleet_is_not_actionable():
    assert not actionable(decide_all(views(node("a"), node("b")), NOW, CFG))


def test_status_row_of_a_node_mid_repair_and_of_an_escalated_one():
    hist = encode(
        [
            Attempt(
                ep=1,
                step="reboot",
                attempt=1,
                start="2026-11-21T11:00:00Z",
                end="2026-11-21T11:05:00Z",
                result="fail",
                phase="verify",
                message="GPU 1 lost",
            )
        ]
    )
    fl = json.dumps(
        {
            "ep": 1,
            "step": "reimage",
            "attempt": 1,
            "phase": "reinstall",
            "status": "running",
            "step_start": "2026-11-21T11:05:00Z",
            "since": "2026-11-21T11:06:00Z",
        }
    )
    [mid] = views(node("a", "reimage", {keys.ANN_HISTORY: hist, keys.ANN_IN_FLIGHT: fl}))
    row = node_status(mid, NOW)
    assert (row["state"], row["doing"], row["since"], row["age"]) == (
        "reimage",
        "reimage#1 reinstall running",
        "2026-11-21T11:05:00Z",
        "55m00s",
    )
    assert row["last_finding"] == "reboot fail: GPU 1 lost" and len(row["attempts"]) == 1
    esc = json.dumps({"ep": 1, "decided": "2026-11-21T11:30:00Z", "sent": "2026-11-21T11:30:01Z"})
    finding = json.dumps(
        {"kind": "xid", "code": 79, "pci": "0000:5a:00", "message": "GPU has fallen off the bus."}
    )
    [manual] = views(
        node(
            "b",
            "manual",
            {
                keys.ANN_ESCALATED: esc,
                keys.ANN_LAST_FINDING: finding,
                keys.ANN_STATE_SINCE: "2026-11-21T11:30:00Z",
            },
        )
    )
    row = node_status(manual, NOW)
    assert row["doing"] == "escalated, email sent 2026-11-21T11:30:01Z"
    assert row["last_finding"] == "Xid 79 on 0000:5a:00: GPU has fallen off the bus."
    table = render_status([node_status(manual, NOW), node_status(mid, NOW)], hidden=5)
    assert table.splitlines()[0].split() == [
        "NODE",
        "STATE",
        "SINCE",
        "DOING",
        "ATTEMPTS",
        "LAST",
        "FINDING",
    ]
    assert "30m00s ago" in table and table.endswith(
        "1 manual, 1 reimage, 5 healthy (5 healthy not shown; --all lists them)"
    )


def test_last_finding_falls_back_to_foreign_signals():
    n = node("a")
    n["spec"]["taints"] = [
        {"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"}
    ]
    [v] = views(n)
    assert last_finding(v, []) == "taint trainy.konduktor.ai/faulty"


def test_a_node_held_by_a_sweep_is_in_maintenance_not_healthy():
    swept = node("a")
    swept["spec"]["taints"] = [CFG.vocabulary().maintenance.as_taint()]
    fenced_too = node("b", "reboot")
    fenced_too["spec"]["taints"].append(CFG.vocabulary().maintenance.as_taint())
    a, b, c = views(swept, fenced_too, node("c"))
    assert (
        a.maintenance
        and a.state == "healthy"
        and host_groups(a)
        == [
            "maintenance",
            "vendor_nvidia",
        ]
    )
    assert host_groups(b) == ["repair_reboot", "maintenance", "vendor_nvidia"]
    assert not c.maintenance and host_groups(c) == ["healthy", "vendor_nvidia"]


def test_controller_host_vars_keep_templates_and_odd_addresses_out():
    [v] = views(
        node(
            "a",
            "reboot",
            {
                keys.ANN_LAST_RESULTS: "{{ lookup('pipe', 'id') }}",
                keys.ANN_HISTORY: "[]",
                "other.io/x": "y",
            },
        )
    )
    address, hv = controller_host_vars(v)
    assert address == "192.0.2.7" and hv["ansible_host"] == "192.0.2.7"
    assert hv["fleetmedic_annotations"] == {keys.ANN_LAST_RESULTS: WITHHELD, keys.ANN_HISTORY: "[]"}
    assert hv["fleetmedic_state"] == "reboot" and hv["k8s_labels"] == {keys.LABEL_VENDOR: "nvidia"}
    assert host_groups(v) == ["repair_reboot", "vendor_nvidia"]
    for bad in ("{{ 7*7 }}", "host; rm -rf /", "-oProxyCommand=x", ""):
        assert safe_address(bad) is None
    for good in ("node-17.example.com", "10.0.0.1", "fd00::1", "[fd00::1]"):
        assert safe_address(good) == good


def test_escalation_reason_is_the_last_failure_of_the_episode():
    hist = encode(
        [
            Attempt(1, "reboot", 1, "t", "t", "pass"),
            Attempt(2, "reboot", 1, "t", "t", "fail", phase="verify", message="GPU 1 lost"),
            Attempt(
                2, "reimage", 1, "t", "t", "unreachable", phase="diagnose", message="ssh: timeout"
            ),
            Attempt(2, "manual", 1, "t", "t", "escalated"),
        ]
    )
    [v] = views(node("a", "manual", {keys.ANN_HISTORY: hist}))
    action = Action("escalate", "a", "the ladder ran out", step="manual", ep=2)
    assert escalation_reason(v, action) == "reimage attempt 1 unreachable at diagnose: ssh: timeout"
    assert (
        escalation_reason(v, Action("escalate", "a", "fenced for manual", ep=3))
        == "fenced for manual"
    )


def test_a_cycle_never_decides_a_node_from_a_view_older_than_its_finished_work(caplog):
    """Regression (seen at 5,000 nodes): a worker that records its outcome and leaves the
    busy set while a cycle is looking must not make that cycle act on the old view. Here
    the escalation email was being recorded; deciding from the view before the record
    sends the email again."""
    import logging

    from kubernetes import client

    from fleetmedic.adapters.kube import Kube
    from fleetmedic.controller.loop import Controller
    from fleetmedic.policy.actions import Kind

    begun = node(
        "x",
        "manual",
        {keys.ANN_ESCALATED: json.dumps({"ep": 1, "decided": "2026-11-21T11:59:00Z"})},
    )
    recorded = node(
        "x",
        "manual",
        {
            keys.ANN_ESCALATED: json.dumps(
                {
                    "ep": 1,
                    "decided": "2026-11-21T11:59:00Z",
                    "sent": "2026-11-21T11:59:01Z",
                    "tries": 1,
                }
            )
        },
    )
    recorded["metadata"]["resourceVersion"] = "2"
    nowhere = "https://127.0.0.1:9"
    kube = Kube(client.ApiClient(client.Configuration(host=nowhere)), nowhere)

    class WorkerFinishesWhileTheCycleLooks(Controller):
        def views(self):
            seen = super().views()
            self.watcher.put(recorded)  # the worker records the outcome...
            with self.workers._lock:
                self.workers._busy.pop("x", None)  # ...then leaves the busy set
            return seen

    cfg = parse(
        {
            "safety": {"min_healthy": 0, "breaker": {"enabled": False}, "pause_configmap": ""},
            "ansible": {"playbook_dir": "/pb"},
        }
    )
    ctl = WorkerFinishesWhileTheCycleLooks(cfg, kube, dry_run=True, clock=lambda: NOW)
    ctl.watcher.put(begun)
    ctl.workers._busy["x"] = Action(
        node="x", kind=Kind.ESCALATE, reason="escalating", step="manual", ep=1
    )
    with caplog.at_level(logging.INFO, logger="fleetmedic.controller.loop"):
        ctl.cycle()
        ctl.cycle()  # the next cycle sees the record
    ctl.workers.pool.shutdown(wait=False)
    lines = [r.getMessage() for r in caplog.records]
    assert not [line for line in lines if "x: escalate" in line], lines
    assert any("waiting for `fleetmedic release`" in line for line in lines), lines


def test_status_shows_the_last_sweep_and_a_sweep_under_way():
    from fleetmedic.model.vocabulary import preset
    from fleetmedic.policy.sweep import LastSweep

    vocab = preset("default")
    swept = LastSweep("2026-11-21T09:00:00Z", "pass", 2, "diag.dcgm: 12 tests passed").encode()
    [done] = views(node("s1", annotations={keys.ANN_LAST_SWEEP: swept}))
    busy = node("s2")
    busy["spec"]["taints"] = [vocab.maintenance.as_taint()]
    [running] = views(busy)
    rows = [node_status(done, NOW), node_status(running, NOW)]
    assert rows[0]["last_sweep"] == {
        "at": "2026-11-21T09:00:00Z",
        "result": "pass",
        "level": 2,
        "summary": "diag.dcgm: 12 tests passed",
    }
    assert rows[1]["last_sweep"] is None and rows[1]["doing"].startswith("sweep under way")
    table = render_status(rows).splitlines()
    assert "LAST SWEEP" in table[0] and "pass 3h00m ago" in table[1]
    assert "14:00:00" not in render_status(rows, since_as_time=True)
    assert "pass 09:00:00" in render_status(rows, since_as_time=True)
    # fleets that do not sweep keep the old table
    assert "LAST SWEEP" not in render_status([node_status(views(node("s3"))[0], NOW)])


def test_status_says_a_replaced_node_waits_for_its_cloud():
    record = '{"ep":1,"at":"2026-11-21T11:58:00Z"}'
    [v] = views(node("r1", "replace", {keys.ANN_REPLACED: record}))
    row = node_status(v, NOW)
    assert row["doing"] == "handed to the cloud at 2026-11-21T11:58:00Z; waiting for it to go"


def test_status_shows_a_quarantine_request_and_the_last_recommendation():
    from fleetmedic.policy import quarantine

    res = quarantine.Result(quarantine.REPLACE, "diag.dcgm: SM Stress (GPU 1)")
    record = quarantine.record(res, 3, "2026-11-21T11:00:00Z", "run-q", "requested by bob")
    asked = quarantine.request_record("alice@bastion", "2026-11-21T11:30:00Z")
    [done, waiting] = views(
        node("q1", "manual", annotations={keys.ANN_QUARANTINE: record}),
        node("q2", "reboot", annotations={keys.ANN_QUARANTINE_REQUEST: asked}),
    )
    rows = [node_status(done, NOW), node_status(waiting, NOW)]
    assert rows[0]["quarantine"]["recommendation"] == "replace"
    assert rows[0]["quarantine"]["why"] == "requested by bob"
    assert rows[1]["quarantine_requested"] == "alice@bastion"
    assert "quarantine requested by alice@bastion" in rows[1]["doing"]
    table = render_status(rows, since_as_time=True).splitlines()
    assert "QUARANTINE" in table[0] and "replace (L3 11:00:00)" in table[1]
    assert "QUARANTINE" not in render_status([rows[1]])
