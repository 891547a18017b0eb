"""The test control plane is a real Kubernetes API server, not a mock.

Each test pins down one API behaviour fleetmedic relies on, through the official
kubernetes client (v37) the way our adapters call it: raw JSON via
``_preload_content=False`` and an explicit patch content type.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
import uuid

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.harness.kube import FLEET_HOST_ADDRESSES, ROOT, KubeCluster, KubeError

pytestmark = pytest.mark.kube

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def call(fn, *args, **kwargs) -> dict:
    """Call a client method for its JSON body (raises ApiException on non-2xx)."""
    kwargs.setdefault("_request_timeout", 15)
    resp = fn(*args, _preload_content=False, **kwargs)
    return json.loads(resp.data) if resp.data else {}


def status_of(fn, *args, **kwargs) -> int:
    try:
        call(fn, *args, **kwargs)
    except ApiException as exc:
        return exc.status
    return 200


def uid() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def api(kube) -> client.ApiClient:
    return config.new_client_from_config(config_file=kube.kubeconfig)


@pytest.fixture(scope="module")
def core(api) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def test_strategic_merge_patch_replaces_the_whole_taint_list(kube, core):
    theirs = {"key": "example.com/theirs", "value": "x", "effect": "NoSchedule"}
    ours = {"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}
    [node] = kube.make_nodes(1, prefix=f"smp-{uid()}", taints=[theirs])
    name = node["metadata"]["name"]
    assert [t["key"] for t in node["spec"]["taints"]] == [theirs["key"]]

    # The trap: spec.taints is listType=atomic (no merge key), so "adding" our taint
    # with a strategic-merge patch drops everyone else's.
    out = call(core.patch_node, name, {"spec": {"taints": [ours]}}, _content_type=SMP)
    assert [t["key"] for t in out["spec"]["taints"]] == [ours["key"]]
    assert call(core.read_node, name)["spec"]["taints"] == [ours]

    # The right way: read, compute the full list, write it back.
    node = call(core.read_node, name)
    full = [theirs, *node["spec"]["taints"]]
    call(
        core.patch_node,
        name,
        {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": full},
        },
        _content_type=MERGE,
    )
    assert {t["key"] for t in call(core.read_node, name)["spec"]["taints"]} == {
        theirs["key"],
        ours["key"],
    }


def test_patch_with_stale_resource_version_gets_409(kube, core):
    [node] = kube.make_nodes(1, prefix=f"rv-{uid()}")
    name, stale = node["metadata"]["name"], node["metadata"]["resourceVersion"]
    call(
        core.patch_node,
        name,
        {"metadata": {"labels": {"someone-else": "was-here"}}},
        _content_type=MERGE,
    )

    patch = {
        "metadata": {"resourceVersion": stale},
        "spec": {
            "taints": [{"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}]
        },
    }
    with pytest.raises(ApiException) as exc:
        call(core.patch_node, name, patch, _content_type=MERGE)
    assert exc.value.status == 409
    assert "modified" in json.loads(exc.value.body)["message"]
    assert not call(core.read_node, name)["spec"].get("taints")

    patch["metadata"]["resourceVersion"] = call(core.read_node, name)["metadata"]["resourceVersion"]
    out = call(core.patch_node, name, patch, _content_type=MERGE)
    assert out["spec"]["taints"][0]["key"] == "fleetmedic.io/repair"
    assert out["metadata"]["labels"]["someone-else"] == "was-here"


def _watch(core, resource_version: str, label_selector: str, until, timeout: int = 10):
    resp = core.list_node(
        watch=True,
        allow_watch_bookmarks=True,
        resource_version=resource_version,
        label_selector=label_selector,
        timeout_seconds=timeout,
        _request_timeout=(5, timeout + 10),
        _preload_content=False,
    )
    events = []
    try:
        buf = b""
        for chunk in resp.stream(amt=65536):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in filter(None, lines):
                ev = json.loads(line)
                events.append(ev)
                if until(events):
                    return events
    finally:
        resp.release_conn()
    return events


def test_watch_with_bookmarks_sees_added_modified_deleted(kube, core):
    tag = uid()
    sel = f"watch-test={tag}"
    rv = call(core.list_node, label_selector=sel)["metadata"]["resourceVersion"]
    [node] = kube.make_nodes(1, prefix=f"watch-{tag}", labels={"watch-test": tag})
    name = node["metadata"]["name"]
    call(core.patch_node, name, {"spec": {"unschedulable": True}}, _content_type=MERGE)
    kube.delete_nodes([name])

    # Replayed from the watch cache: everything since the list's resourceVersion.
    events = _watch(core, rv, sel, lambda evs: evs[-1]["type"] == "DELETED")
    kinds = [e["type"] for e in events if e["type"] != "BOOKMARK"]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED" and "MODIFIED" in kinds
    assert all(e["object"]["metadata"]["name"] == name for e in events if e["type"] != "BOOKMARK")
    cordoned = [
        e for e in events if e["type"] == "MODIFIED" and e["object"]["spec"].get("unschedulable")
    ]
    assert cordoned


def test_watch_resumed_from_before_an_apiserver_restart_is_410_gone(kube, core):
    # The API server serves watches from its watch cache, which starts afresh at
    # the current resourceVersion when the server restarts (and forgets old events
    # as it fills up): a watch resumed from an older resourceVersion gets 410 Gone,
    # and the client must list again.
    tag = uid()
    sel = f"gone={tag}"
    rv = call(core.list_node, label_selector=sel)["metadata"]["resourceVersion"]
    kube.make_nodes(1, prefix=f"gone-{tag}", labels={"gone": tag}, wait=False)
    kube.restart_apiserver()
    try:
        events = _watch(core, rv, sel, lambda evs: True, timeout=5)
    except ApiException as exc:  # some versions answer the request itself with 410
        assert exc.status == 410
    else:
        assert events[0]["type"] == "ERROR", events[:1]
        assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    listed = call(core.list_node, label_selector=sel)
    assert [n["metadata"]["name"] for n in listed["items"]] == [f"gone-{tag}-0"]
    kube.delete_nodes([f"gone-{tag}-0"])
    events = _watch(
        core, listed["metadata"]["resourceVersion"], sel, lambda evs: evs[-1]["type"] == "DELETED"
    )
    assert events[-1]["type"] == "DELETED"


def test_eviction_respects_the_pdb_and_kwok_completes_the_deletion(kube, core, api):
    ns = f"evict-{uid()}"
    [node] = kube.make_nodes(1, prefix=ns)
    pods = kube.make_pods(node["metadata"]["name"], 2, namespace=ns, labels={"app": "guarded"})
    policy = client.PolicyV1Api(api)
    call(
        policy.create_namespaced_pod_disruption_budget,
        ns,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    victim = pods[0]["metadata"]["name"]
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": victim, "namespace": ns},
    }

    kube.set_pdb_status(ns, "guard", disruptions_allowed=0)
    with pytest.raises(ApiException) as exc:
        call(core.create_namespaced_pod_eviction, victim, ns, eviction)
    assert exc.value.status == 429
    assert "disruption budget" in json.loads(exc.value.body)["message"]
    assert call(core.read_namespaced_pod, victim, ns)["metadata"].get("deletionTimestamp") is None

    kube.set_pdb_status(ns, "guard", disruptions_allowed=1)
    call(core.create_namespaced_pod_eviction, victim, ns, eviction)
    # The API server spent the budget itself...
    pdb = call(policy.read_namespaced_pod_disruption_budget, "guard", ns)
    assert pdb["status"]["disruptionsAllowed"] == 0 and victim in pdb["status"]["disruptedPods"]
    # ...and kwok, playing the kubelet, finishes the graceful deletion.
    deadline = time.monotonic() + 30
    while status_of(core.read_namespaced_pod, victim, ns) != 404:
        assert time.monotonic() < deadline, "kwok did not complete the pod deletion"
        time.sleep(0.2)
    assert status_of(core.read_namespaced_pod, pods[1]["metadata"]["name"], ns) == 200


def test_serviceaccount_with_read_only_node_role_gets_403_on_patch(kube, api):
    rbac = client.RbacAuthorizationV1Api(api)
    ns, role = f"rbac-{uid()}", f"node-reader-{uid()}"
    [node] = kube.make_nodes(1, prefix=ns)
    call(
        rbac.create_cluster_role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
            ],
        },
    )
    reader = kube.kubeconfig_for_serviceaccount(ns, "reader")
    nobody = kube.kubeconfig_for_serviceaccount(ns, "nobody")
    call(
        rbac.create_cluster_role_binding,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        },
    )

    as_reader = client.CoreV1Api(config.new_client_from_config(config_file=reader))
    name = node["metadata"]["name"]
    assert call(as_reader.read_node, name)["metadata"]["name"] == name
    assert status_of(as_reader.list_node, label_selector="type=kwok") == 200
    patch = {
        "spec": {
            "taints": [{"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}]
        }
    }
    assert status_of(as_reader.patch_node, name, patch, _content_type=MERGE) == 403
    assert status_of(as_reader.delete_node, name) == 403

    as_nobody = client.CoreV1Api(config.new_client_from_config(config_file=nobody))
    assert status_of(as_nobody.read_node, name) == 403


def test_nodes_carry_the_addresses_and_labels_asked_for(kube, core):
    names = [f"addr-{uid()}-{i}" for i in range(3)]
    ips = ["192.168.250.11", "192.168.250.12", "192.168.250.13"]
    kube.make_nodes(names, labels={"fleetmedic.io/gpu-vendor": "nvidia"}, addresses=ips)
    for name, ip in zip(names, ips, strict=True):
        node = call(core.read_node, name)
        addrs = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addrs == {"InternalIP": ip, "Hostname": name}
        assert node["metadata"]["labels"]["fleetmedic.io/gpu-vendor"] == "nvidia"
        assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    pods = kube.make_pods(names[0], 3, namespace=f"pods-{uid()}")
    assert {p["spec"]["nodeName"] for p in pods} == {names[0]}
    assert all(p["status"]["podIP"] for p in pods)


def _global_ipv4() -> str | None:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout
    for line in out.splitlines():
        return line.split()[3].split("/")[0]
    return None


def test_serving_cert_and_binding_let_fleet_nodes_reach_it(kube):
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((kube.pki / "apiserver.crt").read_bytes())
    ips = {
        str(ip)
        for ip in cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value.get_values_for_type(x509.IPAddress)
    }
    assert {"127.0.0.1", *FLEET_HOST_ADDRESSES} <= ips
    # Bound to the wildcard: reachable on another address of this host too (verified against
    # the "kubernetes.default.svc" name in the cert). A host with no global address still
    # has 127.0.0.2, which a server bound to 127.0.0.1 alone would not answer on.
    addr = _global_ipv4() or "127.0.0.2"
    ctx = ssl.create_default_context(cafile=str(kube.ca_file))
    ctx.load_cert_chain(str(kube.pki / "admin.crt"), str(kube.pki / "admin.key"))
    with (
        socket.create_connection((addr, kube.port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="kubernetes.default.svc") as tls,
    ):
        tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: kubernetes\r\nConnection: close\r\n\r\n")
        assert tls.recv(64).startswith(b"HTTP/1.1 200")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_start_and_stop_leave_nothing_behind(tmp_path):
    cluster = KubeCluster(tmp_path / "k")
    cluster.start()
    try:
        pids = cluster.pids()
        assert set(pids) == {"etcd", "kube-apiserver", "kwok"}
        assert cluster.start_seconds < 60
        port = cluster.port
    finally:
        cluster.stop()
    assert not any(_alive(p) for p in pids.values())
    assert not (tmp_path / "k").exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_failed_start_says_why_in_one_line_and_cleans_up(tmp_path):
    cluster = KubeCluster(tmp_path / "k", extra_args=["--no-such-flag"])
    with pytest.raises(KubeError) as exc:
        cluster.start()
    msg = str(exc.value)
    assert "\n" not in msg and "kube-apiserver exited" in msg
    assert str(cluster.log("kube-apiserver")) in msg
    assert cluster.spawned and not any(_alive(p) for p in cluster.spawned)


@pytest.mark.slow
def test_a_killed_test_run_leaves_no_servers_behind(tmp_path):
    # The parent dies by SIGKILL (no teardown runs); the kernel kills the children.
    script = (
        "import os, sys\n"
        "from tests.harness.kube import KubeCluster\n"
        f"c = KubeCluster({str(tmp_path / 'k')!r}).start()\n"
        "print(' '.join(map(str, c.pids().values())), flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 3, out.stderr[-500:]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if _alive(p)]}"
        time.sleep(0.1)
