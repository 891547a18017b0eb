"""Config for the restore phase's operator-managed path (policy/partition.py,
controller/migop.py): which GPU operator agents restore a node's partition layout, where
their pods run, and how long to wait for them.

The defaults are the published names:

- NVIDIA mig-manager (NVIDIA/mig-parted ``cmd/nvidia-mig-manager/main.go``: it applies the
  ``nvidia.com/mig.config`` label's value when it starts and when the value changes; its
  reconfigure script sets ``nvidia.com/mig.config.state`` to ``pending``, ``rebooting``,
  ``success`` or ``failed``). The GPU operator runs it as the DaemonSet
  ``nvidia-mig-manager`` (pods labelled ``app=nvidia-mig-manager``, NVIDIA/gpu-operator
  ``assets/state-mig-manager/0600_daemonset.yaml``) in the operator's namespace,
  ``gpu-operator`` in NVIDIA's install guide.
- AMD device config manager (ROCm/device-config-manager ``cmd/deviceconfigmanager/main.go``
  and ``pkg/config_manager``: on start it deletes ``dcm.amd.com/gpu-config-profile-state``,
  then partitions by the ``dcm.amd.com/gpu-config-profile`` label and sets the state to
  ``success`` or ``failure``). Its chart labels the pods
  ``app=amdgpu-device-config-manager`` (``helm-charts/templates/daemonsets.yaml``), in the
  AMD GPU operator's namespace ``kube-amd-gpu`` (``docs/configuration/configmap.md``).
"""

from __future__ import annotations

from pydantic import Field

from fleetmedic.model.config.types import Duration, Section


class PartitionOperatorConfig(Section):
    """One operator agent that owns a node's partition layout."""

    name: str
    """How the node's history and the failure lines name it."""
    config_label: str
    """The Node label that selects the layout; a node recorded with it is handed to this
    operator."""
    state_label: str
    """The Node label the agent reports its outcome in."""
    success: str = "success"
    """The state value that means the layout was applied."""
    failure: tuple[str, ...] = ("failed",)
    """State values that mean the agent gave up: the rung fails at once."""
    namespace: str
    """Where the agent's pods run."""
    pod_labels: dict[str, str] = Field(min_length=1)
    """Labels that pick the agent's pod (the one on the node is restarted to re-apply)."""


MIG_MANAGER = PartitionOperatorConfig(
    name="mig-manager",
    config_label="nvidia.com/mig.config",
    state_label="nvidia.com/mig.config.state",
    failure=("failed",),
    namespace="gpu-operator",
    pod_labels={"app": "nvidia-mig-manager"},
)
DEVICE_CONFIG_MANAGER = PartitionOperatorConfig(
    name="device-config-manager",
    config_label="dcm.amd.com/gpu-config-profile",
    state_label="dcm.amd.com/gpu-config-profile-state",
    failure=("failure", "failed"),
    namespace="kube-amd-gpu",
    pod_labels={"app": "amdgpu-device-config-manager"},
)


class RestoreConfig(Section):
    """How the restore phase puts a layout back. A node whose record carries an operator's
    ``config_label`` is operator-managed: the controller restarts that operator's pod on the
    node (through the Eviction API, which it already may use for drains: no new grant),
    waits for the state label to say ``success``, then reads the layout back over SSH as
    for a host-managed node. Every other partitioned node is host-managed
    (roles/gpu_partition)."""

    through_operator: bool = True
    """Hand operator-managed nodes to their operator. False: restore every node from the
    host (nvidia-mig-parted / amd-smi over SSH), which fights an operator that later
    re-applies its own label's layout; only for clusters whose operator is gone."""
    operator_wait: Duration = Field(900, gt=0)
    """From the re-apply's trigger to the state label's ``success``: the pod's restart, its
    init containers and a MIG mode change with GPU resets (mig-manager stops the GPU
    clients first); 15 min as for the host-managed restore. Longer, or ``failure``: the
    rung fails and the ladder climbs. A restarted controller keeps counting from the
    recorded trigger."""
    operators: tuple[PartitionOperatorConfig, ...] = (MIG_MANAGER, DEVICE_CONFIG_MANAGER)
    """The operators known, first match wins; set a namespace or pod labels of your own
    (``kubectl get pods -n <ns> --show-labels``) by listing them here."""
