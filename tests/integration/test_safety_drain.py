"""The drain in the real controller: it waits for evicted pods to be gone before the reboot.

A pod annotated ``fleetmedic.test/ignores-sigterm`` with a 20 s grace period stays
Terminating for 20 s after its eviction (our kwok stage, tests/kube/kwok/stages), as a
process that ignores SIGTERM does until the kubelet kills it. The controller runs the
collection's own playbooks on an nspawn node (diagnose, drain, a real reboot, verify).
The timing is read from what the controller recorded: a watch on the Node collects every
``fleetmedic.io/in-flight`` marker it wrote, whose ``since`` says when each phase began,
and a watch on the pods gives the slow pod's ``deletionTimestamp`` (eviction + 20 s).
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta

import pytest

from fleetmedic.adapters import kube as kube_adapter
from fleetmedic.model import keys
from fleetmedic.policy.history import parse_time
from tests.harness import ctlenv
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import history, state_of, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

SLOW = {"fleetmedic.test/ignores-sigterm": "true"}


class Recorder:
    """Every in-flight marker written on the pool's Nodes, and every pod deletion time
    on ``node``, as the API server delivered them (watches, so none is missed)."""

    def __init__(self, kube, pool: str, node: str) -> None:
        self.api = kube_adapter.connect(kube.kubeconfig)
        self.markers: list[dict] = []
        self.deletion: dict[str, datetime] = {}
        self.stop = threading.Event()
        _, nrv = self.api.list_nodes(f"{ctlenv.POOL_LABEL}={pool}")
        _, prv = self.api.list_pods_on_node(node)
        self.threads = [
            threading.Thread(target=self._nodes, args=(pool, nrv), daemon=True),
            threading.Thread(target=self._pods, args=(node, prv), daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _nodes(self, pool: str, rv: str) -> None:
        while not self.stop.is_set():
            for _, n in self.api.watch_nodes(rv, 2, f"{ctlenv.POOL_LABEL}={pool}"):
                rv = n["metadata"].get("resourceVersion") or rv
                raw = (n["metadata"].get("annotations") or {}).get(keys.ANN_IN_FLIGHT)
                if raw and (not self.markers or self.markers[-1] != json.loads(raw)):
                    self.markers.append(json.loads(raw))

    def _pods(self, node: str, rv: str) -> None:
        while not self.stop.is_set():
            for _, p in self.api.watch_pods_on_node(node, rv, 2):
                rv = p["metadata"].get("resourceVersion") or rv
                if p["metadata"].get("deletionTimestamp"):
                    when = parse_time(p["metadata"]["deletionTimestamp"])
                    self.deletion.setdefault(p["metadata"]["name"], when)

    def phase_start(self, phase: str) -> datetime:
        """When ``phase`` began: the ``since`` of the first marker that names it."""
        for m in self.markers:
            if m["phase"] == phase:
                return parse_time(m["since"])
        raise AssertionError(f"no {phase} phase recorded: {self.markers}")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)


def test_a_pod_20s_to_terminate_holds_the_reboot_20s(safety_bench):
    b = safety_bench(1, tag="drn")
    fleet_node = b.fleet.node(1)
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    ns = f"w{b.pool}"
    [slow] = b.kube.make_pods(
        name,
        1,
        namespace=ns,
        prefix=f"{name}-ckpt",
        annotations=SLOW,
        spec={"terminationGracePeriodSeconds": 20},
    )
    b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-web")
    [ds] = b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-ds", owner_kind="DaemonSet")
    boot = fleet_node.boot_id()
    rec = Recorder(b.kube, b.pool, name)
    cfg = b.config(safety={"drain": {"timeout": 120, "progress_interval": 5}})
    proc = b.controller(cfg)

    def repaired():
        assert proc.alive, proc.tail()
        return state_of(b.kube, name) == "healthy" and history(b.kube, name)

    try:
        wait_until(repaired, 300, f"{name} repaired")
    finally:
        rec.close()
    assert fleet_node.boot_id() != boot, "the node really rebooted"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "pass"), attempt

    drain_start, reboot_start = rec.phase_start("drain"), rec.phase_start("reboot")
    gone_at = rec.deletion[slow["metadata"]["name"]]  # eviction time + its 20 s of grace
    # The stamps have one-second resolution, hence the 1 s of slack.
    assert gone_at - timedelta(seconds=20) >= drain_start - timedelta(seconds=1), (
        "evicted in the drain"
    )
    assert reboot_start >= gone_at - timedelta(seconds=1), (
        f"the reboot began at {reboot_start}, before the pod was gone at {gone_at}"
    )
    held = (reboot_start - drain_start).total_seconds()
    print(
        f"drain began {drain_start:%T}, slow pod gone {gone_at:%T}, reboot began {reboot_start:%T}"
    )
    assert 19 <= held < 60, f"drain phase lasted {held:.0f}s for a pod with 20s of grace"

    left = {
        p["metadata"]["name"]
        for p in b.kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    }
    assert left == {ds["metadata"]["name"]}, "evicted both workload pods, left the DaemonSet's"
    log = proc.log.read_text(errors="replace")
    assert "drain waits" in log and f"{ns}/{slow['metadata']['name']}" in log, (
        "a long drain says which pods it still waits for"
    )
    events = b.kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    )["items"]
    drained = [e["message"] for e in events if e["reason"] == "Drained"]
    assert drained and drained[0].startswith("evicted 2 pod(s) in "), drained


def test_a_pod_the_drain_refuses_is_an_outcome_not_a_skip(safety_bench):
    """A pod that declares no controller (kubectl refuses it without --force) holds the
    drain as a PDB does: with ``pdb_blocked: escalate`` the node goes to manual with the
    reason and the setting that would allow it; the pod is still there."""
    b = safety_bench(1, tag="drf")
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    ns = f"w{b.pool}"
    [bare] = b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-bare", owner_kind=None)
    b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-web")
    cfg = fast_config(b, b.dir, drain={"timeout": 5, "pdb_blocked": "escalate"})
    proc = b.controller(cfg)

    def manual():
        assert proc.alive, proc.tail()
        return state_of(b.kube, name) == "manual"

    wait_until(manual, 60, f"{name} to manual")
    first = history(b.kube, name)[0]
    assert (first["step"], first["result"]) == ("reboot", "drain-blocked"), first
    assert "1 refused" in first["message"] and "safety.drain.force" in first["message"], first
    names = {
        p["metadata"]["name"]
        for p in b.kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    }
    assert names == {bare["metadata"]["name"]}, "the refused pod stays, the other was evicted"
