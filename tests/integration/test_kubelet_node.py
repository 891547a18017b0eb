"""The kubelet test node (tests/harness/kubelet.py): a real kubelet with containerd and
runc inside an nspawn node joins its own API server as a Node and runs pods from images
imported without a registry, without touching the host's sysctls."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.harness.kubelet import KUBELET_SYSCTLS, HostSysctls

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


def _pod_phase(cluster, ns: str, name: str) -> dict:
    return cluster.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")


def test_real_kubelet_node_is_ready(kubelet_cluster, kubelet_fleet, kubelet_binaries):
    node = kubelet_cluster.request("GET", f"/api/v1/nodes/{kubelet_fleet.node(1).name}")
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == kubelet_binaries.version
    assert info["containerRuntimeVersion"].startswith("containerd://1.6")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == kubelet_fleet.node(1).address
    # No annotation of kwok's: nothing fakes this node.
    assert "kwok.x-k8s.io/node" not in (node["metadata"].get("annotations") or {})


def test_scheduled_pod_runs_from_an_imported_image(kubelet_cluster, kubelet_fleet):
    """No nodeName: kube-scheduler places it; the kubelet runs it with containerd and runc
    from the pause image imported at boot (imagePullPolicy Never: no registry)."""
    name = f"pause-{uuid.uuid4().hex[:6]}"
    version = kubelet_cluster.request("GET", "/version")["gitVersion"]
    kubelet_cluster.ensure_namespace("default")
    kubelet_cluster.request(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "hostNetwork": True,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "pause",
                        "image": f"fleetmedic.invalid/pause:{version}",
                        "imagePullPolicy": "Never",
                    }
                ],
            },
        },
    )
    deadline = time.monotonic() + 60
    while True:
        pod = _pod_phase(kubelet_cluster, "default", name)
        if pod["status"].get("phase") == "Running":
            break
        assert time.monotonic() < deadline, f"pod not Running: {pod['status']}"
        time.sleep(0.2)
    assert pod["spec"]["nodeName"] == kubelet_fleet.node(1).name
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    assert cid.startswith("containerd://")
    ps = kubelet_fleet.node(1).ssh(
        f"ctr -n k8s.io tasks ls | grep -c {cid[len('containerd://') :]}"
    )
    assert ps.stdout.strip() == "1"
    kubelet_cluster.request("DELETE", f"/api/v1/namespaces/default/pods/{name}")


def test_host_sysctls_are_untouched(kubelet_fleet):
    """The kubelet runs with protectKernelDefaults and sees its wanted values only inside
    the node: the host keeps its own (kernel.panic=10 would reboot the host on an oops)."""
    node = kubelet_fleet.node(1)
    for name, wanted in KUBELET_SYSCTLS.items():
        seen = node.ssh(f"cat /proc/sys/{name}").stdout.strip()
        assert seen == wanted, name
    # As before the node started (the fixture's snapshot), after the kubelet's start.
    assert HostSysctls().values == kubelet_fleet.host_sysctls.values
    assert node.ssh("systemctl is-active kubelet").stdout.strip() == "active"
