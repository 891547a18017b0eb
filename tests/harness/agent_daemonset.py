"""The agent's DaemonSet on the kubelet test node (tests/harness/kubelet.py): the image
imported into the node's containerd, deploy/agent applied, and what tests and the bench
read back. Used by tests/integration/test_agent_daemonset.py and
bench/xid_to_taint_daemonset.py.

:func:`daemonset_docs` is deploy/agent as shipped, with the test node's stand-ins for
what a GPU node provides (and nothing else):

- the kernel log is the node's test log file (DESIGN.md: the fleet's kernel log is a file
  the test appends real-format lines to), mounted from the node by hostPath;
- the NVIDIA driver's libnvidia-ml.so.1 is the fake one (tests/fakes), mounted from the
  node and found through LD_LIBRARY_PATH, where the NVIDIA container toolkit would mount
  the real one;
- check rounds every 2 s instead of 60 s, and a strike limit of 5, so a test sees strikes
  without fencing.

Everything else is real: the image, containerd and runc, the Pod's projected token, the
kubernetes Service it reaches through the node's network namespace, RBAC and admission.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from fleetmedic.model import keys
from tests.harness import manifests as shipped
from tests.harness.ctlenv import HEALTHY_NVML

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "fleetmedic"
IMAGE_FILE = "fleetmedic-agent.oci.tar"
IMAGE_REF = "docker.io/fleetmedic/fleetmedic:0.1.0"
TEST_STATE = "/var/lib/fleetmedic-test"
REPAIR = "fleetmedic.io/repair"
LABEL = "app.kubernetes.io/name=fleetmedic-agent"


class ImageError(RuntimeError):
    """The agent image is not built; one line saying how to build it."""


def agent_image() -> Path:
    """The archive `make image` built for this checkout (deploy/image/build.sh --print)."""
    p = subprocess.run(
        ["bash", str(ROOT / "deploy/image/build.sh"), "--print"], capture_output=True, text=True
    )
    if p.returncode != 0:
        raise ImageError(p.stderr.strip() or "agent image not built; run: make image")
    return Path(p.stdout.strip())


def daemonset_docs(interval: float = 2, strike_limit: int = 5) -> list[dict]:
    """deploy/agent as shipped, with the test node's stand-ins (module docstring);
    ``interval`` and ``strike_limit`` as given (the bench keeps the shipped 60 s and 3)."""
    docs = copy.deepcopy(shipped.load(ROOT / "deploy" / "agent"))
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            cfg = yaml.safe_load(doc["data"]["agent.yaml"])
            cfg["interval"] = interval
            cfg["strike_limit"] = strike_limit
            cfg["kernel"] = {"source": f"{TEST_STATE}/kern.log"}
            cfg["checks"].update(vendor="nvidia", expected_gpus=2, timeout=10)
            doc["data"]["agent.yaml"] = yaml.safe_dump(cfg)
        if doc["kind"] == "DaemonSet":
            pod = doc["spec"]["template"]["spec"]
            c = pod["containers"][0]
            c["env"] += [
                {"name": "LD_LIBRARY_PATH", "value": "/opt/fleetmedic-fakes/lib"},
                {"name": "FLEETMEDIC_FAKE_NVML", "value": f"{TEST_STATE}/nvml.json"},
            ]
            c["volumeMounts"] += [
                {"name": "test-state", "mountPath": TEST_STATE, "readOnly": True},
                {"name": "fakes", "mountPath": "/opt/fleetmedic-fakes", "readOnly": True},
            ]
            pod["volumes"] += [
                {"name": "test-state", "hostPath": {"path": TEST_STATE, "type": "Directory"}},
                {
                    "name": "fakes",
                    "hostPath": {"path": "/opt/fleetmedic-fakes", "type": "Directory"},
                },
            ]
    return docs


# -- reading the cluster ---------------------------------------------------------------
def agent_pods(cluster) -> list[dict]:
    return cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={LABEL}")[
        "items"
    ]


def ready_pod(cluster, not_uid: str | None = None) -> dict | None:
    for pod in agent_pods(cluster):
        conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
        if (
            conds.get("Ready") == "True"
            and pod["metadata"]["uid"] != not_uid
            and not pod["metadata"].get("deletionTimestamp")
        ):
            return pod
    return None


def node_obj(cluster, name: str) -> dict:
    return cluster.request("GET", f"/api/v1/nodes/{name}")


def strikes(cluster, name: str) -> dict:
    raw = (node_obj(cluster, name)["metadata"].get("annotations") or {}).get(keys.ANN_STRIKES)
    return json.loads(raw) if raw else {}


def repair_state(cluster, name: str) -> str | None:
    for t in node_obj(cluster, name)["spec"].get("taints") or []:
        if t["key"] == REPAIR:
            return t.get("value")
    return None


def clear_repair(cluster, name: str) -> None:
    """What the controller does after a repair: its taints go, anyone else's stay."""
    while True:
        node = node_obj(cluster, name)
        keep = [t for t in node["spec"].get("taints") or [] if t["key"] != REPAIR]
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
        body["spec"] = {"taints": keep or None}
        status, _ = cluster._raw(
            "PATCH", f"/api/v1/nodes/{name}", body, content_type="application/merge-patch+json"
        )
        if status != 409:
            return


def in_pod(node, pod: dict, argv: list[str], timeout: float = 60) -> str:
    """Run ``argv`` inside the pod's agent container (``ctr tasks exec`` on the node)."""
    cid = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)
    out = node.ssh(
        f"ctr -n k8s.io tasks exec --exec-id t{uuid.uuid4().hex[:8]} {cid} {quoted}",
        timeout=timeout,
    )
    return out.stdout


class TaintWatch:
    """Watches one Node through the API; ``wait(tainted)`` returns the monotonic time the
    repair taint was first seen present (or absent)."""

    def __init__(self, cluster, node: str) -> None:
        from fleetmedic.adapters.kube import connect

        self.kube = connect(cluster.kubeconfig)
        self.node = node
        self.cond = threading.Condition()
        self.state: tuple[bool, float] | None = None
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            nodes, rv = self.kube.list_nodes()
            for obj in nodes:
                if obj["metadata"]["name"] == self.node:
                    self._saw(obj, time.monotonic())
            for _kind, obj in self.kube.watch_nodes(rv, timeout=600):
                seen = time.monotonic()
                if obj.get("metadata", {}).get("name") == self.node:
                    self._saw(obj, seen)
                if self.stop.is_set():
                    return

    def _saw(self, obj: dict, seen: float) -> None:
        tainted = any(t.get("key") == REPAIR for t in obj.get("spec", {}).get("taints") or [])
        with self.cond:
            if self.state is None or self.state[0] != tainted:
                self.state = (tainted, seen)
                self.cond.notify_all()

    def wait(self, tainted: bool, timeout: float = 10.0) -> float:
        with self.cond:
            if not self.cond.wait_for(
                lambda: self.state is not None and self.state[0] == tainted, timeout
            ):
                raise AssertionError(f"repair taint {'present' if tainted else 'gone'} not seen")
            assert self.state is not None
            return self.state[1]


def wait_until(what: str, fn, timeout: float, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Deployed:
    docs: list[dict]
    pod: dict
    import_s: float
    apply_to_ready_s: float
    apply_to_running_s: float


def deploy(cluster, fleet, **docs_args) -> Deployed:
    """Import the agent image into the kubelet node (one node) and apply the DaemonSet
    (``daemonset_docs(**docs_args)``); returns when its pod is Ready, timing the import
    and apply -> Ready."""
    node = fleet.node(1)
    archive = fleet.images / IMAGE_FILE
    if not archive.exists():
        try:
            os.link(agent_image(), archive)
        except OSError:
            shutil.copyfile(agent_image(), archive)
    (node.state_dir / "nvml.json").write_text(json.dumps(HEALTHY_NVML))
    t0 = time.monotonic()
    node.ssh(f"ctr -n k8s.io images import /opt/fleetmedic-images/{IMAGE_FILE}", timeout=120)
    import_s = time.monotonic() - t0
    cluster.ensure_namespace("default")
    docs = daemonset_docs(**docs_args)
    t0 = time.monotonic()
    for doc in docs:
        shipped.apply(cluster, doc)
    running_s = None

    def ready() -> dict | None:
        nonlocal running_s
        pods = agent_pods(cluster)
        if running_s is None and any(
            (s.get("state") or {}).get("running")
            for p in pods
            for s in p.get("status", {}).get("containerStatuses") or []
        ):
            running_s = time.monotonic() - t0
        return ready_pod(cluster)

    pod = wait_until("the agent pod Ready", ready, 120, 0.05)
    ready_s = time.monotonic() - t0
    return Deployed(docs, pod, import_s, ready_s, running_s or ready_s)


def undeploy(cluster, docs: list[dict]) -> None:
    for doc in reversed(docs):
        if doc["kind"] != "Namespace":
            shipped.remove(cluster, doc)
