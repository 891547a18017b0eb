"""The circuit breaker with the real controller, API server and SMTP sink.

A storm (6 of 10 Nodes turn unhealthy together, threshold 20 %: more than 2 trips it)
opens the breaker: exactly one storm email, and no repair starts on any node while it is
open, however long we wait and even when more nodes turn. Work the controller had admitted
before the trip (at most the threshold's 2 nodes, since it cannot see the future) may
finish. The trip is recorded on the pause ConfigMap, so a restarted controller starts
with the breaker open (no action, no second email). The storm was a false alarm: a human
removes the taints (`fleetmedic reset`) and resets the breaker (`fleetmedic breaker
reset`); the running controller resumes. Nothing stale is replayed (no action, no second
email, no re-trip from the storm's transitions) and a new single fault is repaired as usual.
Fast test playbooks as in test_safety_budget.py (10 kwok Nodes share 2 SSH nodes).
"""

from __future__ import annotations

import json

import pytest

from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import cli, history, state_of, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


def started(kube, names) -> set[str]:
    """Nodes on which any repair work began (history or an in-flight marker)."""
    out = set()
    for n in names:
        node = ctlenv.node(kube, n)
        ann = node["metadata"].get("annotations") or {}
        if (
            ann.get("fleetmedic.io/history")
            or ann.get("fleetmedic.io/in-flight")
            or node["spec"].get("unschedulable")
        ):
            out.add(n)
    return out


def test_storm_trips_breaker_one_email_no_action_until_reset(safety_bench, smtp_sink, webhook):
    b = safety_bench(2, tag="brk")
    fleet_nodes = list(b.fleet.nodes)
    names = [f"{b.pool}-{i:02d}" for i in range(10)]
    b.make_nodes(names, [fleet_nodes[i % 2].address for i in range(10)])
    cfg = fast_config(
        b,
        b.dir,
        smtp_sink,
        notify={"targets": [{"name": "chat", "url": webhook.url("ops"), "events": ["breaker"]}]},
        max_concurrent=10,
        breaker={
            "enabled": True,
            "threshold_percent": 20,
            "min_nodes": 3,
            "window": 600,
            "cooldown": None,
        },
    )
    b.kube.request(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        {  # as deploy/ ships it
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"fleetmedic-{b.pool}"},
            "data": {"pause": "false"},
        },
    )
    proc = b.controller(cfg)
    wait_until(lambda: "watching 10 nodes" in proc.log.read_text(), 30, "controller ready")
    ctlwait.looked_again(b.kube, cfg, names[0], n=1)  # past the first (baseline) observation

    storm = names[:6]
    ctlenv.taint_all(b.kube, storm)
    [msg] = smtp_sink.wait_for(1, timeout=30)
    assert "circuit breaker open" in msg["Subject"], msg["Subject"]
    post = webhook.wait_for(lambda r: True, timeout=30)  # and one chat message
    assert post.body["title"].startswith("[fleetmedic] circuit breaker open"), post.body
    assert "fleetmedic breaker reset" in post.body["message"]
    early = started(b.kube, names)
    admitted = ctlwait.counts(cfg)["admitted"]
    assert len(early) <= 2, f"more than the threshold begun before the trip: {early}"
    # more nodes turn while it is open: still nothing, and no second email
    ctlenv.taint_all(b.kube, names[6:8])
    seen = ctlwait.looked_again(b.kube, cfg, names[6])  # it has seen them turn
    assert seen["admitted"] == admitted, "nothing admitted while the breaker is open"
    assert started(b.kube, names) == early, "no repair starts while the breaker is open"
    assert len(smtp_sink.messages) == 1, "exactly one storm email"
    assert len(webhook.received) == 1, "exactly one storm chat message"
    assert all(state_of(b.kube, n) == "reboot" for n in set(names[:8]) - early)
    assert "circuit breaker tripped" in proc.log.read_text()

    # a node whose repair began before the trip is held too, at its next phase: no
    # playbook runs, and no drain (it cordons) begins after the trip. A node started in
    # the instant before the third taint reached the controller may have begun its drain
    # already (this ladder's first phase): the breaker cannot undo that, and the log must
    # show that drain came first (CI once saw one: two taints in the first cycle)
    runs = b.dir / "ctl" / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "no playbook ran at all"
    log = proc.log.read_text().splitlines()
    trip = next(i for i, line in enumerate(log) if "circuit breaker tripped" in line)
    late = [line for line in log[trip:] if ": drain drain (" in line and "[held:" not in line]
    assert not late, f"a drain began after the trip: {late}"
    cordoned = {n for n in names if ctlenv.node(b.kube, n)["spec"].get("unschedulable")}
    assert cordoned <= early, f"cordoned without having begun before the trip: {cordoned}"
    record = json.loads(pause_cm(b)["data"]["breaker"])
    # the record names the turns that tripped it: more than the limit of 2, all from the storm
    assert record["tripped_at"] and len(record["nodes"]) >= 3, record
    assert set(record["nodes"]) <= set(storm), record
    st = cli(cfg, "breaker", "status")
    assert st.returncode == 0 and "OPEN since" in st.stdout, (st.stdout, st.stderr)
    st = json.loads(cli(cfg, "breaker", "status", "--json").stdout)
    assert (
        st["open"] and st["tripped_at"] == record["tripped_at"] and st["nodes"] == record["nodes"]
    )

    # a restart keeps it open: the trip is on the ConfigMap
    assert proc.stop() == 0
    proc2 = b.controller(cfg, n=2)
    wait_until(
        lambda: "circuit breaker open since" in proc2.log.read_text(),
        30,
        "the restarted controller to find the breaker open",
    )
    seen = ctlwait.looked_again(b.kube, cfg, names[6])
    assert seen["admitted"] == 0, "nothing admitted after a restart either"
    assert started(b.kube, names) == early, "no repair starts after a restart either"
    assert len(smtp_sink.messages) == 1, "no second storm email after a restart"

    # a human: the storm was a false alarm
    r = cli(cfg, "reset", "--yes")
    assert r.returncode == 0, r.stderr
    before = {n: len(history(b.kube, n)) for n in names}
    assert all(state_of(b.kube, n) == "healthy" for n in names)
    r = cli(cfg, "breaker", "reset", "--yes")
    assert r.returncode == 0 and "reset by" in r.stdout, (r.stdout, r.stderr)
    wait_until(
        lambda: "circuit breaker reset by" in proc2.log.read_text(),
        30,
        "the running controller to see the reset",
    )
    assert not json.loads(pause_cm(b)["data"]["breaker"])["tripped_at"]
    assert "closed" in cli(cfg, "breaker", "status").stdout
    seen = ctlwait.looked_again(b.kube, cfg, names[6])  # cycles with the breaker closed
    assert seen["admitted"] == 0, "nothing stale admitted"
    assert {n: len(history(b.kube, n)) for n in names} == before, "nothing stale replayed"
    assert not any(
        (ctlenv.node(b.kube, n)["metadata"].get("annotations") or {}).get("fleetmedic.io/in-flight")
        for n in names
    )
    assert len(smtp_sink.messages) == 1
    # automation is back: one new fault is repaired, the storm's turns do not re-trip it
    one = names[9]
    ctlenv.taint_all(b.kube, [one])
    wait_until(
        lambda: state_of(b.kube, one) == "healthy" and history(b.kube, one),
        60,
        "the new fault to be repaired",
    )
    assert [(a["step"], a["result"]) for a in history(b.kube, one)] == [("reboot", "pass")]
    assert len(smtp_sink.messages) == 1 and "tripped" not in proc2.log.read_text()


def pause_cm(b) -> dict:
    return b.kube.request("GET", f"/api/v1/namespaces/kube-system/configmaps/fleetmedic-{b.pool}")
