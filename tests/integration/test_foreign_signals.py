"""Other tools' signals with the real controller and API server: a node Konduktor tainted
is repaired once, its taint cleared, and it stays in service; a node the AWS health check
tainted is repaired once, the taint left to the AWS agent, and not repaired again until
that agent sets it anew. Fast test playbooks as in test_safety_budget.py (kwok Nodes on
the fleet's SSH nodes). A node whose node-problem-detector GPUProblem condition is True
(a Node kwok does not manage, whose conditions kwok would rewrite) is repaired once, the
condition left to NPD, and repaired again only when NPD sets it anew; it carries our own
FleetmedicRepair condition beside NPD's."""

from __future__ import annotations

import json

import pytest

from tests.harness import ctlenv
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import cli, history, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

KONDUKTOR = {"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"}
AWS = {"key": "gpu-healthcheck.aws-samples.io/unhealthy", "value": "true", "effect": "NoSchedule"}
THEIRS = {"key": "example.com/team-maintenance", "value": "x", "effect": "NoSchedule"}


def test_foreign_signals_are_repaired_once_with_their_lifecycle(safety_bench):
    b = safety_bench(1, tag="frn")
    addr = b.fleet.node(1).address
    kond, aws = b.make_nodes([f"{b.pool}-k", f"{b.pool}-a"], [addr, addr])
    ctlenv.set_taints(b.kube, kond, lambda t: [*t, KONDUKTOR, THEIRS])
    b.kube.request(
        "PATCH",
        f"/api/v1/nodes/{aws}",
        {
            "metadata": {
                "labels": {"gpu-healthcheck.aws-samples.io/severity": "REBOOT"},
                "annotations": {
                    "gpu-healthcheck.aws-samples.io/results": "dcgmi diag -r 2: PCIe FAIL"
                },
            }
        },
        content_type="application/merge-patch+json",
    )
    ctlenv.set_taints(b.kube, aws, lambda t: [*t, AWS])
    # node-problem-detector's condition, on a Node no kwok manages (kwok would rewrite its
    # conditions), set through the status subresource as NPD sets it
    npd = f"{b.pool}-n"
    b.kube.make_nodes(
        [npd],
        labels={ctlenv.POOL_LABEL: b.pool, "fleetmedic.io/gpu-vendor": "nvidia"},
        addresses=[addr],
        kwok=False,
    )
    b._benches.made.append(npd)
    set_npd(b.kube, npd, "2026-11-25T10:00:00Z")
    cfg = fast_config(b, b.dir)
    proc = b.controller(cfg)
    wait_until(
        lambda: all(
            len(history(b.kube, n)) == 1 and ctlenv.state_of(b.kube, n) == "healthy"
            for n in (kond, aws, npd)
        ),
        90,
        "the three nodes repaired",
    )
    assert condition(b.kube, npd, "GPUProblem")["status"] == "True", "NPD's to clear"
    ours = condition(b.kube, npd, "FleetmedicRepair")
    assert (ours["status"], ours["reason"]) == ("False", "Repaired"), ours
    assert ctlenv.taints(b.kube, kond) == [THEIRS], "Konduktor's taint cleared, nothing else"
    [k] = history(b.kube, kond)
    assert k["result"] == "pass" and "cleared konduktor's" in k["message"]
    assert AWS in ctlenv.taints(b.kube, aws), "the AWS agent removes its own taint"
    handled = ctlenv.annotation(b.kube, aws, "fleetmedic.io/foreign-handled")
    assert list(handled) == ["taint gpu-healthcheck.aws-samples.io/unhealthy"]
    events = b.kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{aws}"
    )["items"]
    entered = [e["message"] for e in events if e["reason"] == "RepairEntered"]
    assert entered and "PCIe FAIL" in entered[0], entered

    # the controller looks again (pause then unpause each node: decisions it logs); the
    # watch delivers in order, so once it logged the AWS node's second "already answered",
    # its snapshot held the Konduktor node's unpause too: no second episode on either
    def pause(n: str, on: bool) -> None:
        b.kube.request(
            "PATCH",
            f"/api/v1/nodes/{n}",
            {"metadata": {"annotations": {"fleetmedic.io/pause": "true" if on else None}}},
            content_type="application/merge-patch+json",
        )

    def said(what: str) -> int:
        return proc.log.read_text().count(f"{aws}: none (-): {what}")

    answered = said("foreign signal")
    for n in (kond, npd, aws):
        pause(n, True)
    wait_until(lambda: said("paused by") == 1, 30, "the AWS node seen paused")
    for n in (kond, npd, aws):
        pause(n, False)
    wait_until(lambda: said("foreign signal") > answered, 30, "the AWS node looked at again")
    assert [len(history(b.kube, n)) for n in (kond, npd, aws)] == [1, 1, 1]
    # NPD sees the problem again (a new transition): a new episode
    set_npd(b.kube, npd, "2026-11-25T11:00:00Z")
    wait_until(lambda: len(history(b.kube, npd)) == 2, 60, "NPD's new transition repaired")
    rows = {r["name"]: r for r in json.loads(cli(cfg, "status", "--json", "--all").stdout)}
    assert rows[aws]["fenced_by"] == "aws-gpu-healthcheck"

    # the AWS agent re-checks and clears its taint, then flags the node again: a new episode
    ctlenv.set_taints(b.kube, aws, lambda t: [x for x in t if x != AWS])
    wait_until(
        lambda: ctlenv.annotation(b.kube, aws, "fleetmedic.io/foreign-handled") is None,
        30,
        "the record of the cleared signal dropped",
    )
    ctlenv.set_taints(b.kube, aws, lambda t: [*t, AWS])
    wait_until(lambda: len(history(b.kube, aws)) == 2, 60, "the new signal repaired")
    assert [a["ep"] for a in history(b.kube, aws)] == [1, 2]


def set_npd(kube, name: str, since: str) -> None:
    cond = {
        "type": "GPUProblem",
        "status": "True",
        "reason": "XidError",
        "message": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        "lastTransitionTime": since,
        "lastHeartbeatTime": since,
    }
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {"status": {"conditions": [cond]}},
        content_type="application/strategic-merge-patch+json",
    )


def condition(kube, name: str, kind: str) -> dict:
    conds = ctlenv.node(kube, name)["status"].get("conditions") or []
    return next(c for c in conds if c["type"] == kind)
