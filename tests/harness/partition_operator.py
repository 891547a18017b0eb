"""A STAND-IN for the GPU operator's node agent, NVIDIA's mig-manager, for the restore phase's
operator-managed tests (tests/integration/test_partition_operator_e2e.py).

mig-manager manages GPU hardware, which the test fleet fakes, so it is the one part these
tests stand in for; everything the controller talks to is real (the kube-apiserver, the
fleet node over SSH). The stand-in runs in the test process and, polling the real API
server, plays two parts as the real ones do:

- the DaemonSet controller's (the test control plane has no controller-manager): it keeps
  one pod labelled ``app=nvidia-mig-manager`` bound to the node, owned by a DaemonSet, and
  makes a new one once the last is gone (kwok completes the deletion an eviction starts);
- the agent's (NVIDIA/mig-parted ``cmd/nvidia-mig-manager/main.go`` and its reconfigure
  script): when a new pod of its starts, or the ``nvidia.com/mig.config`` value changes, it
  asserts the selected config on the node (``nvidia-mig-parted assert``: already applied ->
  ``nvidia.com/mig.config.state=success``), else sets ``pending``, runs
  ``nvidia-mig-parted apply -f CONFIG -c VALUE`` over the node's SSH (the fake mig-parted in
  tests/fakes changes the fake GPUs' state) and sets ``success`` or ``failed``.

``mode="silent"`` is an agent that never answers (its pod comes back, no state is ever
set). Unlike a real container, the stand-in does not restart when the fleet node reboots
(the kwok Node does not reboot with it), so the layout comes back only through the
controller's trigger: the tests prove that trigger.
"""

from __future__ import annotations

import json
import shlex
import threading
import uuid
from typing import Any, ClassVar
from urllib.parse import quote

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
POD_LABELS = {"app": "nvidia-mig-manager"}
CONFIG_PATH = "/var/lib/fleetmedic-test/mig-parted-config.json"
"""On the node (the host side is the node's state_dir): mig-parted reads YAML, and JSON is
YAML."""


class MigManagerStandIn:
    config_label = CONFIG_LABEL
    state_label = STATE_LABEL
    pod_labels: ClassVar[dict[str, str]] = POD_LABELS
    pod_prefix = "nvidia-mig-manager"

    def __init__(
        self,
        kube,
        node_name: str,
        fleet_node,
        namespace: str,
        configs: dict[str, Any],
        mode: str = "apply",
    ) -> None:
        self.kube, self.node_name, self.fleet_node = kube, node_name, fleet_node
        self.namespace, self.mode = namespace, mode
        self.configs = configs
        self.pods: list[str] = []  # uids of the pods made, in order
        self.runs: list[tuple[str, str]] = []  # (label value, state set), one per agent run
        self.errors: list[str] = []
        self._seen: tuple[str, str] = ("", "")  # (pod uid, label value) of the last run
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mig-manager-stand-in", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> MigManagerStandIn:
        self._prepare()
        self.kube.ensure_namespace(self.namespace)
        self._step()  # the first pod, and (below) its first run, before the test goes on
        self._step()
        self._thread.start()
        return self

    def _prepare(self) -> None:
        spec = {"version": "v1", "mig-configs": self.configs}
        (self.fleet_node.state_dir / "mig-parted-config.json").write_text(json.dumps(spec))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._step()
            except Exception as exc:  # kept for the test to show, then tried again
                self.errors.append(f"{type(exc).__name__}: {exc}")

    # -- one look at the API server ------------------------------------------------------
    def _step(self) -> None:
        pods = self._pods()
        if not pods:
            self._make_pod()  # the DaemonSet controller's part
            return
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if not live:
            return  # the old pod is going: its successor comes once it is gone
        uid = live[0]["metadata"]["uid"]
        value = self._labels().get(self.config_label, "")
        if (uid, value) == self._seen:
            return  # the agent applies on its start and on a changed value, not otherwise
        self._seen = (uid, value)
        self._run(value)

    def _pods(self) -> list[dict]:
        sel = quote(",".join(f"{k}={v}" for k, v in self.pod_labels.items()))
        where = quote(f"spec.nodeName={self.node_name}")
        path = f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={sel}&fieldSelector={where}"
        return self.kube.request("GET", path).get("items") or []

    def _make_pod(self) -> None:
        [pod] = self.kube.make_pods(
            self.node_name,
            namespace=self.namespace,
            prefix=f"{self.pod_prefix}-{uuid.uuid4().hex[:5]}",
            labels=self.pod_labels,
            owner_kind="DaemonSet",
            spec={"terminationGracePeriodSeconds": 1},
            wait=False,
        )
        self.pods.append(pod["metadata"]["uid"])

    def _labels(self) -> dict[str, str]:
        node = self.kube.request("GET", f"/api/v1/nodes/{self.node_name}")
        return node["metadata"].get("labels") or {}

    def _set_state(self, state: str | None) -> None:
        self.kube.request(
            "PATCH",
            f"/api/v1/nodes/{self.node_name}",
            {"metadata": {"labels": {self.state_label: state}}},
            content_type="application/merge-patch+json",
        )

    # -- the agent's part: what reconfigure-mig.sh does ---------------------------------------
    def _run(self, value: str) -> None:
        if self.mode == "silent" or not value:
            self.runs.append((value, ""))
            return
        flags = f"-f {CONFIG_PATH} -c {shlex.quote(value)}"
        if self.fleet_node.ssh(f"nvidia-mig-parted assert {flags}", check=False).returncode == 0:
            state = "success"
        else:
            self._set_state("pending")
            p = self.fleet_node.ssh(f"nvidia-mig-parted apply {flags}", check=False)
            state = "success" if p.returncode == 0 else "failed"
        self._set_state(state)
        self.runs.append((value, state))


DCM_CONFIG_LABEL = "dcm.amd.com/gpu-config-profile"
DCM_STATE_LABEL = "dcm.amd.com/gpu-config-profile-state"


class DeviceConfigManagerStandIn(MigManagerStandIn):
    """The same STAND-IN for AMD's device config manager (ROCm/device-config-manager
    ``cmd/deviceconfigmanager/main.go``, ``pkg/config_manager``): on start it removes its
    state label, then for the profile its label names (``configs``: ``{name: {"compute":
    "CPX", "memory": "NPS4"}}``) sets each GPU that differs, memory partition first, with
    the driver reload a memory-partition change needs, through the node's fake amd-smi over
    SSH (``amd-smi static --partition --json`` for the current ones, as DCM reads them
    through amdsmi), and sets ``success`` or ``failure``."""

    config_label = DCM_CONFIG_LABEL
    state_label = DCM_STATE_LABEL
    pod_labels: ClassVar[dict[str, str]] = {"app": "amdgpu-device-config-manager"}
    pod_prefix = "amdgpu-device-config-manager"

    def _prepare(self) -> None:
        pass

    def _run(self, value: str) -> None:
        self._set_state(None)
        want = self.configs.get(value)
        if self.mode == "silent" or want is None:
            self.runs.append((value, ""))
            return
        out = self.fleet_node.ssh("amd-smi static --partition --json").stdout
        data = json.loads(out)
        rows = data.get("gpu_data", []) if isinstance(data, dict) else data
        have = [row.get("partition") or {} for row in rows]
        mem, comp = shlex.quote(want["memory"]), shlex.quote(want["compute"])
        memory = [i for i, p in enumerate(have) if p.get("memory_partition") != want["memory"]]
        compute = [i for i, p in enumerate(have) if p.get("compute_partition") != want["compute"]]
        steps = [f"amd-smi set -g {i} --memory-partition {mem}" for i in memory]
        steps += ["amd-smi reset --reload-driver"] if memory else []
        # (the reload may bring compute partitions back: set them all after one)
        steps += [
            f"amd-smi set -g {i} --compute-partition {comp}"
            for i in (range(len(have)) if memory else compute)
        ]
        ok = all(self.fleet_node.ssh(c, check=False).returncode == 0 for c in steps)
        state = "success" if ok else "failure"
        self._set_state(state)
        self.runs.append((value, state))
