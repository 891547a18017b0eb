"""NVSentinel's ExternalRemediationRequest on the real API server, through fleetmedic's
adapter (adapters/nvsentinel.py), with NVSentinel's own CRD (tests/data/nvsentinel): its
schema accepts the requests NVSentinel's template makes and fleetmedic's status writes, and
rejects a malformed one; our write keeps NVSentinel's condition and loses no concurrent
update; the API group is found from what the server serves. And the RBAC: the shipped
ClusterRole has no ERR verbs; the opt-in deploy/controller/nvsentinel.yaml adds exactly
get/list/watch and the status patch, and everything else stays 403.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from fleetmedic.adapters.kube import MERGE_PATCH, connect
from fleetmedic.adapters.nvsentinel import Requests
from fleetmedic.errors import ConfigError, ForbiddenError, PermanentError
from fleetmedic.policy.nvsentinel import read
from tests.harness.ctlenv import wait_until
from tests.harness.ctlrbac import NAMESPACE, install_controller_rbac, manifests
from tests.harness.manifests import apply, remove
from tests.harness.nvsentinel import (
    API,
    COMPLETE,
    GROUP,
    RELEASED,
    VERSION,
    NVSentinel,
    health_event,
    install_crd,
)

pytestmark = [pytest.mark.kube]


@pytest.fixture
def nv(kube):
    install_crd(kube)
    standin = NVSentinel(kube)
    yield standin
    standin.forget()


def ours(message: str, status: str = "Unknown", reason: str = "RemediationInProgress") -> dict:
    return {
        "type": COMPLETE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-28T12:00:00Z",
        "observedGeneration": 1,
    }


def test_the_crd_takes_nvsentinels_requests_and_our_status_writes(kube, nv):
    [node] = kube.make_nodes(1, prefix="nvapi")
    name = node["metadata"]["name"]
    event = health_event(
        name,
        action=24,  # the protobuf number: the CRD takes either
        entities=(("PCI", "0000:28:00.0"), ("GPU_UUID", "GPU-1")),
    )
    req = nv.create_request(event)
    nv.initialize(req)
    k = connect(kube.kubeconfig)
    errs = Requests(k, GROUP, VERSION)
    errs.check_served()
    [page] = [p for p, _ in errs.list_pages()]
    got = read(next(o for o in page if o["metadata"]["name"] == req))
    assert got.event.action == "RESTART_BM" and got.event.entities[1] == ("GPU_UUID", "GPU-1")

    written = errs.set_condition(req, ours("fleetmedic: reboot attempt 1 of episode 1, drain"))
    conds = {c["type"]: c for c in written["status"]["conditions"]}
    assert conds[COMPLETE] == ours("fleetmedic: reboot attempt 1 of episode 1, drain"), (
        "every field kept: nothing pruned by NVSentinel's schema"
    )
    assert conds[RELEASED]["reason"] == "Initializing", "NVSentinel's condition kept"
    # the schema bites: a malformed status is refused, an unknown field is pruned
    bad = {"status": {"conditions": [{"type": COMPLETE, "status": 5}]}}
    with pytest.raises(PermanentError, match="422"):
        k._call(
            "bad status",
            "PATCH",
            f"{API}/{req}/status",
            body=bad,
            content_type=MERGE_PATCH,
        )
    kube.request(
        "PATCH", f"{API}/{req}/status", {"status": {"fleetmedic": "x"}}, content_type=MERGE_PATCH
    )
    assert "fleetmedic" not in nv.get(req)["status"]

    errs.post_event(written, "RemediationStep", "reboot attempt 1", "Normal")
    events = kube.request(
        "GET",
        "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D" + req,
    )["items"]
    [ev] = [e for e in events if e["reason"] == "RemediationStep"]
    assert ev["involvedObject"]["kind"] == "ExternalRemediationRequest"
    assert ev["involvedObject"]["apiVersion"] == f"{GROUP}/{VERSION}"


def test_a_write_racing_janitors_keeps_its_condition(kube, nv):
    """Janitor writes its condition between our read and our write: our write, made on the
    stale copy, is refused (resourceVersion precondition), read again and made on top."""
    req = nv.create_request(health_event(f"nvrv-{uuid.uuid4().hex[:5]}"))
    nv.initialize(req)
    errs = Requests(connect(kube.kubeconfig), GROUP, VERSION)
    real_get, raced = errs.get, []

    def get_then_janitor(name: str) -> dict:
        obj = real_get(name)
        if not raced:  # once, right after our first read
            raced.append(name)
            nv._set_condition(req, RELEASED, "True", "ReleaseTaintApplied", "janitor, meanwhile")
        return obj

    errs.get = get_then_janitor  # type: ignore[method-assign]
    errs.set_condition(req, ours("fleetmedic: ours"))
    conds = {c["type"]: c for c in nv.get(req)["status"]["conditions"]}
    assert raced and conds[RELEASED]["message"] == "janitor, meanwhile", "janitor's write lost"
    assert conds[COMPLETE]["message"] == "fleetmedic: ours"


def test_concurrent_condition_writes_lose_nothing(kube, nv):
    """NVSentinel's janitor and fleetmedic each write their own condition into the one list
    (no merge key): RV-guarded read-modify-writes keep both writers' last word."""
    req = nv.create_request(health_event(f"nvrace-{uuid.uuid4().hex[:5]}"))
    nv.initialize(req)
    errs = Requests(connect(kube.kubeconfig), GROUP, VERSION)
    n = 25

    def fleetmedic() -> None:
        for i in range(n):
            errs.set_condition(req, ours(f"fleetmedic: step {i}"))

    def nvsentinel() -> None:
        for i in range(n):
            nv._set_condition(req, RELEASED, "True", "ReleaseTaintApplied", f"nvsentinel {i}")

    threads = [threading.Thread(target=fleetmedic), threading.Thread(target=nvsentinel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    conds = {c["type"]: c for c in nv.get(req)["status"]["conditions"]}
    assert conds[COMPLETE]["message"] == f"fleetmedic: step {n - 1}"
    assert conds[RELEASED]["message"] == f"nvsentinel {n - 1}"
    assert len(nv.get(req)["status"]["conditions"]) == 2


def test_the_api_group_is_found_from_what_the_server_serves(kube, nv):
    k = connect(kube.kubeconfig)
    with pytest.raises(ConfigError) as exc:
        Requests(k, "nvsentinel.nvidia.com", "v1alpha1").check_served()  # ADR-040's group
    said = str(exc.value)
    assert "served as nvsentinel.dgxc.nvidia.com/v1: set nvsentinel.api_group" in said, said
    assert "\n" not in said


def test_watch_sees_requests_come_and_change(kube, nv):
    errs = Requests(connect(kube.kubeconfig), GROUP, VERSION)
    rv = [rv for _, rv in errs.list_pages()][-1]
    req = nv.create_request(health_event(f"nvwatch-{uuid.uuid4().hex[:5]}"))
    nv.initialize(req)
    kinds = [(kind, o["metadata"]["name"]) for kind, o in errs.watch(rv, timeout=2)]
    assert ("ADDED", req) in kinds and ("MODIFIED", req) in kinds, kinds


def forbidden(fn) -> None:
    with pytest.raises(ForbiddenError) as err:
        fn()
    assert "HTTP 403" in str(err.value)


def bind(kube, role: str, sa: str) -> dict:
    """A ClusterRoleBinding of the shipped ClusterRole ``role`` to a ServiceAccount of this
    test's own (the shipped bindings name fleetmedic-controller, which other tests of the
    session may be granting the opt-in at the same time)."""
    doc = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{sa}-{role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
    }
    apply(kube, doc)
    return doc


def test_the_err_grant_is_opt_in_and_exactly_what_the_responder_calls(kube, nv):
    install_controller_rbac(kube)
    [node] = kube.make_nodes(1, prefix="nvrbac")
    req = nv.create_request(health_event(node["metadata"]["name"]))
    nv.initialize(req)
    sa = f"nvrbac-{uuid.uuid4().hex[:5]}"
    k = connect(kube.kubeconfig_for_serviceaccount(NAMESPACE, sa))
    errs = Requests(k, GROUP, VERSION)
    plural = "externalremediationrequests"
    [grant] = [d for d in manifests(["nvsentinel.yaml"]) if d["kind"] == "ClusterRole"]
    apply(kube, grant)  # (the shipped ClusterRole, unchanged)
    bindings = [bind(kube, "fleetmedic-controller", sa)]
    try:
        # the shipped ClusterRole alone: no ERR verb at all
        wait_until(
            lambda: k.list_nodes(), 10, "the base grant in effect", tolerate=(ForbiddenError,)
        )
        forbidden(lambda: list(errs.list_pages()))
        forbidden(lambda: errs.get(req))
        bindings.append(bind(kube, grant["metadata"]["name"], sa))
        wait_until(lambda: errs.get(req), 10, "the grant in effect", tolerate=(ForbiddenError,))
        # what the responder calls works
        errs.check_served()
        assert any(o["metadata"]["name"] == req for p, _ in errs.list_pages() for o in p)
        rv = [rv for _, rv in errs.list_pages()][-1]
        list(errs.watch(rv, timeout=1))
        errs.set_condition(req, ours("fleetmedic: rbac"))
        # and nothing else on the requests
        obj = errs.get(req)
        coll = f"/apis/{GROUP}/{VERSION}/{plural}"
        forbidden(
            lambda: k._call("create", "POST", coll, body={**obj, "metadata": {"name": f"{req}-x"}})
        )
        forbidden(lambda: k._call("delete", "DELETE", f"{coll}/{req}"))
        forbidden(lambda: k._call("delete all", "DELETE", coll))
        forbidden(lambda: k._call("update", "PUT", f"{coll}/{req}", body=obj))
        forbidden(
            lambda: k._call(
                "patch spec",
                "PATCH",
                f"{coll}/{req}",
                body={"metadata": {"labels": {"x": "y"}}},
                content_type=MERGE_PATCH,
            )
        )
        forbidden(lambda: k._call("update status", "PUT", f"{coll}/{req}/status", body=obj))
        # nor anything the opt-in grant would not need: other groups, CRDs, nodes
        forbidden(
            lambda: k._call(
                "other group", "GET", "/apis/janitor.dgxc.nvidia.com/v1alpha1/rebootnodes"
            )
        )
        forbidden(
            lambda: k._call(
                "crds", "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            )
        )
        forbidden(
            lambda: k._call("delete node", "DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
        )
        forbidden(lambda: k._call("secrets", "GET", "/api/v1/secrets"))
    finally:
        for doc in bindings:
            remove(kube, doc)
        kube.delete_nodes([node["metadata"]["name"]])
