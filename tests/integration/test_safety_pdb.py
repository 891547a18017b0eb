"""A PodDisruptionBudget blocks the drain; what happens follows ``safety.drain.pdb_blocked``.

The PDB's status is written as the disruption controller would (disruptionsAllowed 0), so
the real Eviction API answers 429. Per mode, with a 3 s drain timeout:
- ``wait``:     the node stays in ``reboot``, cordoned, the pod stays, nothing is rebooted
                (no playbook runs); once the PDB allows it, the next try drains and repairs.
- ``skip``:     repaired without evicting the protected pod (noted in the history).
- ``force``:    the protected pod is deleted, then repaired.
- ``escalate``: straight to ``manual`` with a ``drain-blocked`` attempt, nothing rebooted.
Fast test playbooks (see test_safety_budget.py); the unprotected pod is always evicted
and the DaemonSet pod always left alone.
"""

from __future__ import annotations

import json

import pytest

from tests.harness import ctlenv
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import history, state_of, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


def live_pods(kube, ns: str) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        if not p["metadata"].get("deletionTimestamp")
    }


def waiting_drain(kube, name: str) -> str | None:
    """When the node's drain waits for a retry (blocked): the retry time it waits for."""
    raw = (ctlenv.node(kube, name)["metadata"].get("annotations") or {}).get(
        "fleetmedic.io/in-flight"
    )
    marker = json.loads(raw) if raw else {}
    if marker.get("phase") == "drain" and marker.get("status") == "pending":
        return marker.get("retry_at")
    return None


@pytest.mark.parametrize("mode", ["wait", "skip", "force", "escalate"])
def test_pdb_blocked_drain_follows_config(safety_bench, mode):
    b = safety_bench(1, tag=f"pdb{mode[:2]}")
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    ns = f"w{b.pool}"
    [guarded] = b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-db", labels={"app": "db"})
    [free] = b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-web", labels={"app": "web"})
    [ds] = b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-ds", owner_kind="DaemonSet")
    b.kube.request(
        "POST",
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        },
    )
    b.kube.set_pdb_status(ns, "db", 0)
    g, f, d = (p["metadata"]["name"] for p in (guarded, free, ds))
    cfg = fast_config(b, b.dir, drain={"timeout": 3, "pdb_blocked": mode, "retry_interval": 5})
    proc = b.controller(cfg)

    def alive():
        assert proc.alive, proc.tail()

    if mode == "wait":
        wait_until(lambda: alive() or "DrainBlocked" in proc.log.read_text(), 60, "DrainBlocked")
        first = wait_until(lambda: waiting_drain(b.kube, name), 30, "the drain's back-off")
        wait_until(  # a retry ran (a new back-off written) and found it still blocked
            lambda: alive() or waiting_drain(b.kube, name) not in (None, first),
            60,
            "a retried drain",
        )
        assert state_of(b.kube, name) == "reboot"
        assert ctlenv.node(b.kube, name)["spec"].get("unschedulable"), "cordoned while waiting"
        assert g in live_pods(b.kube, ns) and f not in live_pods(b.kube, ns)
        assert not (b.dir / "ctl" / "runs").exists() or not any(
            "verify" in r.name for r in (b.dir / "ctl" / "runs").iterdir()
        ), "nothing ran"
        b.kube.set_pdb_status(ns, "db", 1)  # the app can spare one now
        wait_until(lambda: alive() or state_of(b.kube, name) == "healthy", 60, "repaired")
        assert g not in live_pods(b.kube, ns)
    elif mode == "escalate":
        wait_until(lambda: alive() or state_of(b.kube, name) == "manual", 60, "manual")
        steps = [(a["step"], a["result"]) for a in history(b.kube, name)]
        assert steps[0] == ("reboot", "drain-blocked"), steps
        assert g in live_pods(b.kube, ns)
        assert not any("verify" in r.name for r in (b.dir / "ctl" / "runs").glob("*"))
    else:
        wait_until(lambda: alive() or state_of(b.kube, name) == "healthy", 60, "repaired")
        assert (g in live_pods(b.kube, ns)) == (mode == "skip")
        if mode == "skip":
            assert "drain incomplete" in str(history(b.kube, name)), history(b.kube, name)
    if mode != "escalate":
        assert [(a["step"], a["result"]) for a in history(b.kube, name)] == [("reboot", "pass")]
        assert not ctlenv.node(b.kube, name)["spec"].get("unschedulable")
    assert f not in live_pods(b.kube, ns), "the unprotected pod was evicted"
    assert d in live_pods(b.kube, ns), "the DaemonSet pod was left alone"
