"""The restore phase for operator-managed nodes: hand the layout to the GPU operator's agent
on the node and wait for it (policy/partition.py decides which operator; the config and the
sources of the label names are in model/config/partition.py).

NVIDIA's mig-manager re-applies ``nvidia.com/mig.config`` only when the value changes or
when its pod starts (NVIDIA/mig-parted ``cmd/nvidia-mig-manager/main.go``: the informer's
add handler on start, the update handler on a changed value); AMD's device config manager
partitions by its profile label on start too (ROCm/device-config-manager
``cmd/deviceconfigmanager/main.go``). Changing the label and back would apply a foreign
layout in between, so the trigger is a restart of the agent's pod on the node, through the
Eviction API: the controller may already evict pods for its drains (deploy/controller/
rbac.yaml), so this needs no new grant, and a PodDisruptionBudget on the agent is obeyed.
The DaemonSet brings the pod back; it must tolerate the repair taint
(``fleetmedic.io/repair``) for that.

Once per request id, in this order:

1. one Node write keeps the trigger in the layout record (``handoff``: request id, the pod
   to restart, the time) and removes the operator's state label, so that any ``success``
   seen afterwards is the new apply's and not the one from before the repair (the device
   config manager removes it itself when it starts);
2. the pod recorded there is evicted, unless it is already gone or going: a controller
   killed between 1 and 2 evicts it when it resumes; one killed after 2 does not evict
   again, nor does one that finds the operator already done;
3. the state label is read every ``POLL`` seconds until it says success (the playbook then
   reads the layout back over SSH), failure, or ``operator_wait`` has passed since the
   recorded trigger (the rung fails with one line saying which).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleetmedic.adapters.cluster import Cluster, pods_of
from fleetmedic.errors import ForbiddenError, TemporaryError, TooManyRequests
from fleetmedic.model import keys
from fleetmedic.model.config.partition import PartitionOperatorConfig, RestoreConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import partition
from fleetmedic.policy.actions import Action, Outcome
from fleetmedic.policy.history import parse_time, stamp

log = logging.getLogger(__name__)

POLL = 2.0
"""Seconds between reads of the Node while waiting: one GET of one Node, and a mig-manager
apply takes tens of seconds at the least."""
HOSTVAR = "fleetmedic_partition_operator"
"""Tells playbooks/restore.yml that the operator applied the layout: it only reads it back."""


@dataclass
class HandOff:
    """What the executor does next: ``failed`` (the phase's outcome), or the run with
    ``hostvars`` added and ``note`` for the history."""

    failed: Outcome | None = None
    hostvars: dict[str, Any] = field(default_factory=dict)
    op: PartitionOperatorConfig | None = None
    value: str = ""
    waited: float = 0.0


def restore(
    cluster: Cluster,
    view: NodeView,
    action: Action,
    cfg: RestoreConfig,
    cancel: threading.Event,
    cancelled: type[Exception],
) -> HandOff:
    """Hand ``view``'s layout to its operator and wait (a host-managed node: nothing to do).
    ``cancelled`` is the executor's Cancelled, raised on shutdown or lost leadership: the
    in-flight marker stays running and the next leader resumes from the recorded trigger."""
    found = partition.operator_for(view, action.ep, cfg)
    if found is None:
        return HandOff()
    op, value = found
    try:
        return _hand_off(cluster, view, action, cfg, op, value, cancel, cancelled)
    except ForbiddenError as exc:  # a grant taken away: the rung fails, not a retry forever
        return _failed(
            f"{op.name} restore not allowed: {exc} (deploy/controller/rbac.yaml grants "
            "pods list, pods/eviction create and nodes patch)"
        )


def _hand_off(
    cluster: Cluster,
    view: NodeView,
    action: Action,
    cfg: RestoreConfig,
    op: PartitionOperatorConfig,
    value: str,
    cancel: threading.Event,
    cancelled: type[Exception],
) -> HandOff:
    rid = str(action.hostvars.get("fleetmedic_request_id") or "")
    trigger = partition.handoff(view, rid)
    if trigger is None:
        pods = _agent_pods(cluster, view.name, op)
        if not pods:
            return _failed(
                f"no {op.name} pod on the node (namespace {op.namespace}, labels "
                f"{_selector(op)}): cannot hand the {op.config_label}={value} restore to it"
            )
        pod = pods[0]["metadata"]
        trigger = {"rid": rid, "pod": pod["uid"], "name": pod["name"], "at": stamp(_now())}
        _record(cluster, view.name, op, trigger)
        log.info("%s: restore handed to %s (%s=%s)", view.name, op.name, op.config_label, value)
    try:
        _restart(cluster, view.name, op, trigger)
    except TooManyRequests as exc:
        return _failed(f"{op.name} pod {trigger.get('name')} not restarted: {exc}")
    began = (parse_time(trigger.get("at")) or _now()).timestamp()
    deadline = began + cfg.operator_wait
    while True:
        labels = (cluster.get_node(view.name)["metadata"].get("labels")) or {}
        state = partition.operator_state(op, labels)
        waited = time.time() - began
        if state == "success":
            log.info("%s: %s reports %s after %.0fs", view.name, op.name, op.success, waited)
            return HandOff(hostvars={HOSTVAR: op.name}, op=op, value=value, waited=waited)
        if state == "failure":
            return _failed(
                f"{op.name} reported {op.state_label}={labels.get(op.state_label)} "
                f"applying {op.config_label}={value}"
            )
        if time.time() >= deadline:
            return _failed(_timeout_line(cluster, view.name, op, value, labels, trigger, cfg))
        if cancel.wait(POLL):
            raise cancelled(f"{view.name}: the wait for {op.name} was abandoned")


def _now() -> datetime:
    return datetime.now(UTC)


def _failed(line: str) -> HandOff:
    return HandOff(failed=Outcome("failed", message=line, task="operator"))


def _selector(op: PartitionOperatorConfig) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(op.pod_labels.items()))


def _agent_pods(cluster: Cluster, node: str, op: PartitionOperatorConfig) -> list[dict]:
    """The agent's pods on ``node`` that are not being deleted (one LIST, narrowed to the
    node by field selector, as the drain's)."""
    pods, _ = pods_of(cluster, "the GPU operator's hand-off").list_pods_on_node(node)
    return [
        p
        for p in pods
        if p["metadata"].get("namespace") == op.namespace
        and not p["metadata"].get("deletionTimestamp")
        and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in op.pod_labels.items())
    ]


def _record(cluster: Cluster, node: str, op: PartitionOperatorConfig, trigger: dict) -> None:
    """Step 1: the trigger into the record, the stale state label off, in one write."""

    def mutate(n: dict) -> bool:
        meta = n["metadata"]
        ann = meta.setdefault("annotations", {})
        value = partition.with_handoff(ann.get(keys.ANN_PARTITION), trigger)
        if value is None:
            raise TemporaryError(f"{node}: the partition record vanished before the hand-off")
        ann[keys.ANN_PARTITION] = value
        (meta.get("labels") or {}).pop(op.state_label, None)
        return True

    cluster.update_node(node, mutate)


def _restart(cluster: Cluster, node: str, op: PartitionOperatorConfig, trigger: dict) -> None:
    """Step 2: evict the recorded pod if it is still there and not going."""
    for p in _agent_pods(cluster, node, op):
        if p["metadata"]["uid"] == trigger.get("pod"):
            log.info("%s: restarting %s pod %s", node, op.name, p["metadata"]["name"])
            pods_of(cluster, "the GPU operator's hand-off").evict_pod(
                op.namespace, p["metadata"]["name"]
            )


def _timeout_line(
    cluster: Cluster,
    node: str,
    op: PartitionOperatorConfig,
    value: str,
    labels: dict,
    trigger: dict,
    cfg: RestoreConfig,
) -> str:
    state = labels.get(op.state_label) or "unset"
    back = [p for p in _agent_pods(cluster, node, op) if p["metadata"]["uid"] != trigger.get("pod")]
    why = (
        ""
        if back
        else f"; no new {op.name} pod on the node (does its DaemonSet tolerate the repair taint?)"
    )
    return (
        f"{op.name} did not report {op.state_label}={op.success} for {op.config_label}={value} "
        f"within {cfg.operator_wait:.0f}s ({op.state_label}: {state}){why}"
    )
