"""Two profiles on one controller, with the real API server, SSH nodes and SMTP sink: each
profile keeps its own budget, and a storm in one trips only that profile's breaker while
the other profile's repairs go on. Fast test playbooks as in test_safety_budget.py (10 kwok
Nodes share 2 SSH nodes)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import cli, history, state_of, wait_until
from tests.harness.smtp import body_text

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

POOL = "example.com/pool"


def in_flight(kube, names) -> set[str]:
    return {
        n
        for n in names
        if (ctlenv.node(kube, n)["metadata"].get("annotations") or {}).get(
            "fleetmedic.io/in-flight"
        )
    }


def test_budgets_and_breakers_are_per_profile(safety_bench, smtp_sink):
    b = safety_bench(2, tag="prf")
    addr = [n.address for n in b.fleet.nodes]
    train = b.make_nodes(
        [f"{b.pool}-t{i}" for i in range(5)], (addr * 3)[:5], labels={POOL: "train"}
    )
    infer = b.make_nodes(
        [f"{b.pool}-i{i}" for i in range(5)], (addr * 3)[:5], labels={POOL: "infer"}
    )
    cfg = fast_config(b, b.dir, smtp_sink)
    data = yaml.safe_load(cfg.read_text())
    base = {"min_healthy": 0, "max_concurrent_percent": 100}
    data["profiles"] = [
        {  # one at a time, no breaker
            "name": "training",
            "selector": f"{POOL}=train",
            "safety": {**base, "max_concurrent": 1, "breaker": {"enabled": False}},
        },
        {  # more than 1 of its 5 nodes turning within 10 min is a storm
            "name": "inference",
            "selector": f"{POOL} in (infer)",
            "safety": {
                **base,
                "max_concurrent": 3,
                "breaker": {
                    "enabled": True,
                    "threshold_percent": 20,
                    "min_nodes": 3,
                    "window": 600,
                    "cooldown": None,
                },
            },
        },
    ]
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    b.kube.request(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"fleetmedic-{b.pool}"}},
    )
    proc = b.controller(cfg)
    wait_until(lambda: "watching 10 nodes" in proc.log.read_text(), 30, "controller ready")
    ctlwait.looked_again(b.kube, cfg, train[0], n=1)  # past the breakers' first observation

    ctlenv.taint_all(b.kube, train[:3] + infer[:3])
    [msg] = smtp_sink.wait_for(1, timeout=30)
    assert "(profile inference)" in msg["Subject"], msg["Subject"]
    assert "--profile inference" in body_text(msg)
    early = in_flight(b.kube, infer) | {n for n in infer if history(b.kube, n)}
    # the breaker's limit for 5 nodes is 2 (it logs "limit 2"): at most that many began
    # before the third turn tripped it
    assert len(early) <= 2, f"more than the breaker's limit begun before the trip: {early}"

    # training goes on, one node at a time, while inference's breaker holds inference
    def training_done() -> bool:
        busy = in_flight(b.kube, train)
        assert len(busy) <= 1, f"training has one slot, yet {busy} were in repair at once"
        return all(state_of(b.kube, n) == "healthy" and history(b.kube, n) for n in train[:3])

    wait_until(training_done, 120, "the training faults to be repaired", interval=0.2)
    assert (in_flight(b.kube, infer) | {n for n in infer if history(b.kube, n)}) == early
    assert "breaker of profile inference tripped" in proc.log.read_text()

    cm = b.kube.request("GET", f"/api/v1/namespaces/kube-system/configmaps/fleetmedic-{b.pool}")
    data = cm.get("data") or {}
    assert json.loads(data["breaker.inference"])["tripped_at"]
    assert "breaker.training" not in data and "breaker" not in data
    st = json.loads(cli(cfg, "breaker", "status", "--json").stdout)
    assert {s["profile"]: s["open"] for s in st} == {
        "training": False,
        "inference": True,
        "default": False,
    }
    rows = {r["name"]: r["profile"] for r in json.loads(cli(cfg, "status", "--json").stdout)}
    assert {rows[n] for n in train} == {"training"} and {rows[n] for n in infer} == {"inference"}
    assert "PROFILE" in cli(cfg, "status").stdout

    # a human resets inference's breaker: its faults are repaired after all
    r = cli(cfg, "breaker", "reset", "--profile", "inference", "--yes")
    assert r.returncode == 0 and "of profile inference reset by" in r.stdout, (r.stdout, r.stderr)
    wait_until(
        lambda: all(state_of(b.kube, n) == "healthy" for n in infer[:3]),
        120,
        "the inference faults to be repaired after the reset",
    )
    assert len(smtp_sink.messages) == 1, "one storm email"
    r = cli(cfg, "breaker", "reset", "--profile", "nope", "--yes")
    assert r.returncode != 0 and r.stderr.strip().startswith("fleetmedic: error: --profile: no")

    # a node two profiles select is an error, in one line, for `plan` and at start-up
    data = yaml.safe_load(cfg.read_text())
    data["profiles"].append({"name": "everything", "selector": POOL})
    data["metrics"]["port"] = ctlenv.free_port()
    bad = cfg.with_name("overlapping.yaml")
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    for args in (("plan",), ("run", "--once")):
        r = cli(bad, *args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0, (args, r.stdout, r.stderr)
        assert lines[-1].startswith("fleetmedic: error: profiles: node ") and (
            "is selected by profiles training and everything" in lines[-1]
            or "is selected by profiles inference and everything" in lines[-1]
        ), (args, r.stderr)
        assert "more nodes" in lines[-1]
