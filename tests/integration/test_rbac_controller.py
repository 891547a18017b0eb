"""The controller with exactly the RBAC of deploy/controller (no admin rights anywhere):
a ServiceAccount token bound only by the shipped ClusterRole and Roles repairs a node end
to end (watch, cordon, drain through the Eviction API, Leases, Events, pause ConfigMap,
uncordon), and every call outside those grants is refused with 403.
"""

from __future__ import annotations

import pytest

from fleetmedic.adapters.kube import MERGE_PATCH, connect
from fleetmedic.errors import ForbiddenError, PermanentError
from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import fast_playbooks
from tests.harness.ctlenv import history, state_of, wait_until
from tests.harness.ctlrbac import NAMESPACE, SA, install_controller_rbac, manifests
from tests.harness.manifests import apply, remove

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


def forbidden(fn) -> str:
    with pytest.raises(ForbiddenError) as err:
        fn()
    assert "HTTP 403" in str(err.value), str(err.value)
    return str(err.value)


def test_shipped_rbac_repairs_a_node_end_to_end(safety_bench):
    b = safety_bench(1, tag="rbac")
    install_controller_rbac(b.kube)
    sa_kubeconfig = b.kube.kubeconfig_for_serviceaccount(NAMESPACE, SA)
    node = b.fleet.node(1)  # GPUs healthy: a human's taint, so verify passes after the reboot
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    ns = f"w{b.pool}"
    work = b.kube.make_pods(name, 2, namespace=ns)
    ds = b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-ds", owner_kind="DaemonSet")
    boot = node.boot_id()
    cfg = b.config(
        kube={"kubeconfig": sa_kubeconfig},
        leader_election={"namespace": NAMESPACE, "lease_name": f"fleetmedic-{b.pool}"},
        safety={"pause_configmap": f"{NAMESPACE}/fleetmedic"},
    )
    proc = b.controller(cfg)

    def repaired():
        assert proc.alive, proc.tail()
        return state_of(b.kube, name) == "healthy" and history(b.kube, name)

    wait_until(repaired, 240, f"{name} repaired with the shipped RBAC")
    assert node.boot_id() != boot
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "pass"), attempt
    n = ctlenv.node(b.kube, name)
    assert not n["spec"].get("unschedulable"), "our cordon was undone"
    pods = b.kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    left = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}
    assert not left & {p["metadata"]["name"] for p in work}, f"workload pods evicted: {left}"
    assert ds[0]["metadata"]["name"] in left, "the DaemonSet pod is left alone"
    events = b.kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    )["items"]
    assert "Repaired" in {e["reason"] for e in events}
    lease = b.kube.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/fleetmedic-{b.pool}"
    )
    assert lease["spec"]["holderIdentity"], "the leader Lease was taken with the SA's rights"
    log = proc.log.read_text(errors="replace")
    assert "HTTP 403" not in log and "forbidden" not in log.lower(), log[-3000:]
    status = ctlenv.cli(cfg, "status", "--json")
    assert status.returncode == 0, status.stderr


def test_force_drain_without_the_opt_in_grant_goes_to_a_human(safety_bench):
    """pdb_blocked: force with the shipped RBAC only (no force-drain.yaml): deleting the
    protected pod is refused, so the node goes to manual once, with the reason, instead of
    retrying the forbidden delete round after round."""
    b = safety_bench(1, tag="frc")
    install_controller_rbac(b.kube)
    for doc in manifests(["force-drain.yaml"]):
        remove(b.kube, doc)
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    ns = f"w{b.pool}"
    [guarded] = b.kube.make_pods(name, 1, namespace=ns, prefix=f"{name}-db", labels={"app": "db"})
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
    cfg = b.config(
        ansible={"playbook_dir": fast_playbooks(b.dir), "forks": 5},
        ladder={"reboot": {"phases": ["drain", "verify"]}},
        kube={"kubeconfig": b.kube.kubeconfig_for_serviceaccount(NAMESPACE, SA)},
        leader_election={"namespace": NAMESPACE, "lease_name": f"fleetmedic-{b.pool}"},
        safety={
            "pause_configmap": f"{NAMESPACE}/fleetmedic",
            "drain": {"timeout": 2, "pdb_blocked": "force", "retry_interval": 3},
        },
    )
    proc = b.controller(cfg)

    def manual():
        assert proc.alive, proc.tail()
        return state_of(b.kube, name) == "manual"

    wait_until(manual, 60, f"{name} to go to manual")
    attempt, *rest = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "drain-blocked"), attempt
    assert [(a["step"], a["result"]) for a in rest] in ([], [("manual", "escalated")]), rest
    assert "force-drain.yaml" in attempt["message"] and "403" in attempt["message"], attempt
    events = b.kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    )["items"]
    assert "DrainForceForbidden" in {e["reason"] for e in events}
    pods = b.kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    assert guarded["metadata"]["name"] in {p["metadata"]["name"] for p in pods}, "pod kept"
    wait_until(lambda: len(history(b.kube, name)) >= 2, 60, "the escalation recorded")
    ctlwait.looked_again(b.kube, cfg, name)  # cycles that saw it in manual: no second try
    assert proc.log.read_text(errors="replace").count("forcing deletion of") == 1
    assert [a["result"] for a in history(b.kube, name)] == ["drain-blocked", "escalated"]


def test_everything_outside_the_shipped_rbac_is_forbidden(kube):
    install_controller_rbac(kube)
    k = connect(kube.kubeconfig_for_serviceaccount(NAMESPACE, SA))
    [node] = kube.make_nodes(1, prefix="rbacx")
    name = node["metadata"]["name"]
    [pod] = kube.make_pods(name, 1, namespace="rbacx")
    pname = pod["metadata"]["name"]
    kube.request(
        "POST",
        "/api/v1/namespaces/fleetmedic/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "rbacx"}},
        ok=(409,),
    )
    try:
        # what it needs works
        k.list_nodes()
        k.update_node(
            name,
            lambda n: (
                n["metadata"].setdefault("annotations", {}).update({"fleetmedic.io/rbac-test": "1"})
            ),
        )
        _, rv = k.list_pods_on_node(name)
        list(k.watch_pods_on_node(name, rv, 1))  # the drain waits on this watch
        assert k.get_config_map(NAMESPACE, "fleetmedic")["data"]["pause"] == "false"  # shipped
        k.patch_config_map_data(NAMESPACE, "fleetmedic", {"rbac-test": "1"})  # the breaker's record
        k.patch_config_map_data(NAMESPACE, "fleetmedic", {"rbac-test": None})
        k.set_node_condition(  # fleetmedic's own NodeCondition (policy/condition.py)
            name, {"type": "FleetmedicRepair", "status": "False", "reason": "Repaired"}
        )
        node_path = f"/api/v1/nodes/{name}"
        ns_path = f"/api/v1/namespaces/{NAMESPACE}"
        pod_path = f"/api/v1/namespaces/rbacx/pods/{pname}"
        # and nothing else
        forbidden(lambda: k._call("delete node", "DELETE", node_path))
        forbidden(
            lambda: k._call(
                "create node",
                "POST",
                "/api/v1/nodes",
                body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{name}-new"}},
            )
        )
        status = kube.request("GET", f"/api/v1/nodes/{name}/status")
        forbidden(  # the status is patched by condition type, never replaced whole
            lambda: k._call("replace node status", "PUT", f"{node_path}/status", body=status)
        )
        forbidden(lambda: k._call("read secret", "GET", f"{ns_path}/secrets/rbacx"))
        forbidden(lambda: k._call("list secrets", "GET", "/api/v1/secrets"))
        forbidden(
            lambda: k._call(
                "patch pod",
                "PATCH",
                pod_path,
                body={"metadata": {"labels": {"x": "y"}}},
                content_type=MERGE_PATCH,
            )
        )
        forbidden(lambda: k._call("delete pod", "DELETE", pod_path))
        forbidden(lambda: k._call("get pod", "GET", pod_path))
        forbidden(
            lambda: k._call("other configmap", "GET", f"{ns_path}/configmaps/kube-root-ca.crt")
        )
        forbidden(lambda: k.patch_config_map_data(NAMESPACE, "kube-root-ca.crt", {"x": "y"}))
        forbidden(
            lambda: k._call(
                "create configmap",
                "POST",
                f"{ns_path}/configmaps",
                body={"metadata": {"name": "rbacx"}, "data": {}},
            )
        )
        forbidden(
            lambda: k._call("delete our configmap", "DELETE", f"{ns_path}/configmaps/fleetmedic")
        )
        forbidden(
            lambda: k._call(
                "lease elsewhere",
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x",
            )
        )
        forbidden(
            lambda: k._call(
                "delete lease",
                "DELETE",
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/x",
            )
        )
        forbidden(
            lambda: k._call(
                "event elsewhere",
                "POST",
                "/api/v1/namespaces/kube-system/events",
                body={"metadata": {"name": "x"}, "involvedObject": {"kind": "Node", "name": name}},
            )
        )
        # the opt-in force-drain grant adds pod delete, and only that
        force = manifests(["force-drain.yaml"])
        for doc in force:
            apply(kube, doc)
        try:
            wait_until(
                lambda: k.delete_pod("rbacx", pname) is None,
                10,
                "pod delete allowed",
                tolerate=(PermanentError,),
            )
            forbidden(
                lambda: k._call(
                    "patch pod",
                    "PATCH",
                    pod_path,
                    body={"metadata": {"labels": {"x": "y"}}},
                    content_type=MERGE_PATCH,
                )
            )
        finally:
            for doc in force:
                remove(kube, doc)
    finally:
        kube.delete_nodes([name])
