"""Domain incidents with the real controller, API server, SMTP sink and chat receiver.

An 18-node NVLink clique (kwok Nodes labelled ``nvidia.com/gpu.clique``): 5 of its nodes
fence within seconds (well inside two minutes), so one incident opens: one email and one
chat message naming the domain and its nodes, an Event and a record on each of its 18
nodes, the metrics, the record on the pause ConfigMap; and no node of the clique is
repaired (no playbook, no cordon), however long we wait, across a restart of the
controller, until a human releases it with `fleetmedic domain release`: then its fenced
nodes go to their own ladders and are repaired. Meanwhile a lone failure in another
clique is repaired as usual. Incidents in three domains at once trip the breaker as
before. Fast stand-in playbooks as in test_safety_budget.py (kwok Nodes share 2 SSH nodes).
"""

from __future__ import annotations

import json

import pytest

from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import cli, history, state_of, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

CLIQUE = "nvidia.com/gpu.clique"


def started(kube, names) -> set[str]:
    """Nodes on which any repair work began (history, an in-flight marker, a cordon)."""
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


def pause_cm(b) -> dict:
    return b.kube.request("GET", f"/api/v1/namespaces/kube-system/configmaps/fleetmedic-{b.pool}")


def make_pause_cm(b) -> None:
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


def cliques(b, sizes: dict[str, int]) -> dict[str, list[str]]:
    """kwok Nodes per clique, spread over the fleet's SSH nodes."""
    fleet = list(b.fleet.nodes)
    out = {}
    for clique, size in sizes.items():
        names = [f"{b.pool}-{clique}-{i:02d}" for i in range(size)]
        addresses = [fleet[i % len(fleet)].address for i in range(size)]
        out[clique] = b.make_nodes(names, addresses, labels={CLIQUE: clique})
    return out


def metric(cfg, series: str) -> float | None:
    import yaml

    port = yaml.safe_load(cfg.read_text())["metrics"]["port"]
    return ctlenv.scrape(port, series)


def test_a_clique_that_fences_together_is_one_incident_and_is_not_repaired_node_by_node(
    safety_bench, smtp_sink, webhook
):
    b = safety_bench(2, tag="dom")
    nodes = cliques(b, {"a": 18, "b": 1})
    a, [lone] = nodes["a"], nodes["b"]
    cfg = fast_config(
        b,
        b.dir,
        smtp_sink,
        notify={"targets": [{"name": "chat", "url": webhook.url("ops"), "events": ["breaker"]}]},
        max_concurrent=3,
    )
    cfg.write_text(
        cfg.read_text()
        + "domains:\n"
        + f"- {{key: {CLIQUE}, threshold: 5, window: 2m, settle: 20s}}\n"
    )
    make_pause_cm(b)
    proc = b.controller(cfg)
    wait_until(lambda: "watching 19 nodes" in proc.log.read_text(), 30, "controller ready")
    ctlwait.looked_again(b.kube, cfg, a[0], n=1)  # past the first (baseline) observation

    failing = a[:5]
    for n in failing:  # one after another, as agents fence (within seconds, not at once)
        ctlenv.taint_all(b.kube, [n])
    ctlenv.taint_all(b.kube, [lone])
    [msg] = smtp_sink.wait_for(1, timeout=60)
    assert f"domain incident {CLIQUE}=a" in msg["Subject"], msg["Subject"]
    assert "5 of 18 nodes" in msg["Subject"], msg["Subject"]
    body = msg.get_body(("html",)).get_content()
    assert all(n in body for n in failing), "the email names the fenced nodes"
    assert "fenced at reboot (5 nodes)" in body, "and what they have in common"
    assert f"fleetmedic domain release {CLIQUE}=a" in body
    post = webhook.wait_for(lambda r: "domain incident" in r.body["title"], timeout=30)
    assert f"{CLIQUE}=a" in post.body["title"] and failing[0] in post.body["message"]

    # the lone failure in the other clique is repaired as usual
    wait_until(
        lambda: state_of(b.kube, lone) == "healthy" and history(b.kube, lone),
        120,
        "the lone failure to be repaired",
    )
    assert [(x["step"], x["result"]) for x in history(b.kube, lone)] == [("reboot", "pass")]

    # nothing on the clique, however long we look
    seen = ctlwait.looked_again(b.kube, cfg, a[7], n=3)
    assert started(b.kube, a) == set(), "no repair began on any node of the clique"
    assert all(state_of(b.kube, n) == "reboot" for n in failing), "they stay fenced"
    assert len(smtp_sink.messages) == 1, "exactly one email"
    assert sum("domain incident" in r.body["title"] for r in webhook.received) == 1
    assert "domain incident nvidia.com/gpu.clique=a opened" in proc.log.read_text()

    # the record, the nodes' records and Events, the metrics
    [record] = json.loads(pause_cm(b)["data"]["domains"])
    assert (record["key"], record["value"], sorted(record["nodes"])) == (CLIQUE, "a", failing)
    assert not record.get("closed_at")
    wait_until(
        lambda: all(ctlenv.annotation(b.kube, n, "fleetmedic.io/domain-incidents") for n in a),
        30,
        "the incident recorded on each of the clique's 18 nodes",
    )
    assert not ctlenv.annotation(b.kube, lone, "fleetmedic.io/domain-incidents")
    events = b.kube.request(
        "GET", "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D" + a[17]
    )["items"]
    assert any(e["reason"] == "DomainIncidentOpened" for e in events), events
    assert metric(cfg, f'fleetmedic_domain_incidents_total{{key="{CLIQUE}"}}') == 1
    assert metric(cfg, "fleetmedic_domain_incidents_open") == 1

    # what people see: status groups the held nodes, plan, history, the domain command
    st = cli(cfg, "status")
    assert st.returncode == 0, st.stderr
    assert f"domain incident {CLIQUE}=a: 18 node(s) held" in st.stdout, st.stdout
    pl = cli(cfg, "plan")
    assert pl.returncode == 0, pl.stderr
    assert f"domain {CLIQUE}=a: open" in pl.stdout, pl.stdout
    assert "held: domain incident" in pl.stdout, pl.stdout
    hi = cli(cfg, "history", failing[0])
    assert hi.returncode == 0 and f"domain incident {CLIQUE}=a: opened" in hi.stdout, hi.stdout
    ds = json.loads(cli(cfg, "domain", "status", "--json").stdout)
    assert [(d["open"], d["value"]) for d in ds] == [(True, "a")]
    dry = cli(cfg, "domain", "release", "a", "--dry-run")
    assert dry.returncode == 0 and "nothing changed" in dry.stdout, (dry.stdout, dry.stderr)
    bad = cli(cfg, "domain", "release", "zz", "--yes")
    assert bad.returncode == 2 and "no open domain incident 'zz'" in bad.stderr, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1

    # a restart finds the incident on the record: still held, no second email
    assert proc.stop() == 0
    proc2 = b.controller(cfg, n=2)
    wait_until(
        lambda: f"domain incident {CLIQUE}=a open since" in proc2.log.read_text(),
        30,
        "the restarted controller to find the incident",
    )
    seen = ctlwait.looked_again(b.kube, cfg, a[7], n=3)
    assert seen["admitted"] == 0, "nothing admitted after the restart"
    assert started(b.kube, a) == set()
    assert len(smtp_sink.messages) == 1, "no second email after a restart"

    # a human releases it: the fenced nodes go to their own ladders and are repaired
    r = cli(cfg, "domain", "release", f"{CLIQUE}=a", "--yes")
    assert r.returncode == 0 and "released by" in r.stdout, (r.stdout, r.stderr)
    wait_until(
        lambda: all(state_of(b.kube, n) == "healthy" for n in failing),
        180,
        "the released clique's fenced nodes to be repaired",
    )
    assert all(
        [(x["step"], x["result"]) for x in history(b.kube, n)] == [("reboot", "pass")]
        for n in failing
    )
    [record] = json.loads(pause_cm(b)["data"]["domains"])
    assert record["closed_at"] and "released by hand" in record["why"]
    wait_until(lambda: metric(cfg, "fleetmedic_domain_incidents_open") == 0, 30, "no incident open")
    assert len(smtp_sink.messages) == 1, "the release sends no new page"


def test_incidents_in_three_domains_at_once_trip_the_breaker_as_before(safety_bench, smtp_sink):
    b = safety_bench(2, tag="dom3")
    nodes = cliques(b, {"x": 4, "y": 4, "z": 4, "w": 3})
    cfg = fast_config(
        b,
        b.dir,
        smtp_sink,
        max_concurrent=3,
        breaker={"enabled": True, "threshold_percent": 20, "min_nodes": 3, "window": 600},
    )
    cfg.write_text(
        cfg.read_text() + "domains:\n" + f"- {{key: {CLIQUE}, threshold: 3, settle: 30s}}\n"
    )
    make_pause_cm(b)
    proc = b.controller(cfg)
    wait_until(lambda: "watching 15 nodes" in proc.log.read_text(), 30, "controller ready")
    ctlwait.looked_again(b.kube, cfg, nodes["w"][0], n=1)

    storm = [n for c in ("x", "y", "z") for n in nodes[c][:3]]
    ctlenv.taint_all(b.kube, storm)
    msgs = smtp_sink.wait_for(4, timeout=60)  # three incidents and the storm
    subjects = sorted(m["Subject"] for m in msgs)
    assert sum("circuit breaker open" in s for s in subjects) == 1, subjects
    assert sorted(
        s.split("domain incident ")[1].split(":")[0] for s in subjects if "domain" in s
    ) == [f"{CLIQUE}={c}" for c in ("x", "y", "z")], subjects
    wait_until(
        lambda: metric(cfg, f'fleetmedic_domain_incidents_total{{key="{CLIQUE}"}}') == 3,
        30,
        "three incidents counted",
    )
    assert "circuit breaker tripped" in proc.log.read_text()
    record = json.loads(pause_cm(b)["data"]["breaker"])
    assert record["tripped_at"] and set(record["nodes"]) <= set(storm), record
    seen = ctlwait.looked_again(b.kube, cfg, nodes["w"][0], n=2)
    assert seen["admitted"] == 0 and started(b.kube, storm) == set()
    assert len(smtp_sink.messages) == 4
