"""The return gate's first half: a node goes back with the GPU partition layout it had.

A GPU reset, a reboot or a reinstall can lose MIG instances (from Hopper on MIG mode
itself) and AMD compute and memory partitions, and the node then comes back "healthy" with
resources its jobs no longer find. So:

- the ``diagnose`` phase (the first phase of every repair rung, and the one SSH run before
  the repair) also records the layout (roles/gpu_partition, action ``record``); its last
  line of output is that record, which :func:`record_from` keeps in the Node's
  ``fleetmedic.io/partition-layout`` annotation with the episode. The first record of an
  episode is kept: a later rung's diagnose runs after a repair that may already have lost
  the layout. On the Node, it survives a controller restart between the record and the
  restore;
- the ``restore`` phase, between the repair and verify, puts it back (playbooks/restore.yml,
  action ``restore``), once per request id, reads it back and fails with one line saying
  what differs (the ladder climbs). Where the record says the node had no partitions, or
  nothing was recorded, the phase is passed over without a run (:func:`needs_restore`), so
  a rung costs what it did before for the nodes that never used partitions.

Operator-managed nodes (issue 30, part 2): a record that carries a GPU operator's layout
label (``nvidia.com/mig.config`` for NVIDIA's mig-manager, ``dcm.amd.com/gpu-config-profile``
for AMD's device config manager; ``ladder.restore.operators``) is handed to that operator
instead of being applied over SSH: the operator re-applies its label's layout and would
undo any other. :func:`operator_for` says which; controller/migop.py restarts its pod on the
node and waits for its state label, after writing :func:`with_handoff` (the trigger, kept in
the record before it happens, so a restarted controller never triggers twice); the
playbook then only reads the layout back (``fleetmedic_partition_operator``).

Pure: decoding and deciding only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.config.partition import PartitionOperatorConfig, RestoreConfig
from fleetmedic.model.nodestate import NodeView

PHASE = "restore"
RECORD_PHASE = "diagnose"
OPERATOR_LABELS = ("nvidia.com/mig.config", "dcm.amd.com/gpu-config-profile")
"""Labels by which the GPU operators' partition managers (NVIDIA's mig-manager, AMD's device
config manager) say which layout a node should have: kept with the record."""
MAX_RECORD = 16 * 1024
"""Bytes of one record on the Node: an 8-GPU layout is under 2 KiB; a run that printed
something else as its last line must not fill the Node's 256 KiB of annotations."""


def record(view: NodeView) -> dict[str, Any] | None:
    """The recorded layout annotation (None: none, or unreadable)."""
    rec = view.annotation_json(keys.ANN_PARTITION)
    return rec if isinstance(rec, dict) and isinstance(rec.get("layout"), dict) else None


def layout_for(view: NodeView, ep: int) -> dict[str, Any] | None:
    """The layout recorded in episode ``ep`` (None: none recorded in it)."""
    rec = record(view)
    return rec["layout"] if rec is not None and rec.get("ep") == ep else None


def needs_restore(view: NodeView, ep: int) -> bool:
    """True when this episode recorded a partitioned layout: only then does the restore
    phase run a playbook."""
    layout = layout_for(view, ep)
    return bool(layout and layout.get("partitioned"))


def skip_note(view: NodeView, ep: int) -> str:
    """Why the restore phase was passed over, for the attempt's history."""
    if layout_for(view, ep) is None:
        return "restore: no partition layout recorded before the repair; nothing to restore"
    return "restore: no GPU partitions before the repair; left alone"


def record_from(view: NodeView, ep: int, stdout: str, at: str) -> dict[str, str]:
    """The annotation to write after a diagnose run (empty: keep what is there). The run's
    last output line is the role's record (``{"request_id", "at", "summary", "layout"}``);
    anything else (an older playbook, a run that failed before it) records nothing."""
    if layout_for(view, ep) is not None:
        return {}  # the first record of the episode stands: later ones may follow a repair
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    if len(line) > MAX_RECORD:
        return {}
    try:
        data = json.loads(line)
    except ValueError:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("layout"), dict):
        return {}
    labels = {k: view.labels[k] for k in OPERATOR_LABELS if k in view.labels}
    rec = {
        "ep": ep,
        "at": at,
        "summary": str(data.get("summary", ""))[:400],
        "layout": data["layout"],
        **({"labels": labels} if labels else {}),
    }
    return {keys.ANN_PARTITION: json.dumps(rec, separators=(",", ":"))}


def hostvars(view: NodeView, ep: int) -> dict[str, Any]:
    """What playbooks/restore.yml needs beyond the usual host variables."""
    return {"fleetmedic_partition_layout": layout_for(view, ep) or {}}


def restored_note(stdout: str) -> str:
    """The history's line for a restore that passed: the layout before and after."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        data = json.loads(line)
    except ValueError:
        return "restore: passed"
    if not isinstance(data, dict):
        return "restore: passed"
    if isinstance(data.get("note"), str):  # an operator's restore (controller/migop.py)
        return data["note"]
    verb = "applied" if data.get("applied") else "already in place"
    return f"restore: {verb}; before: {data.get('before', '?')}; after: {data.get('after', '?')}"


def operator_for(
    view: NodeView, ep: int, restore: RestoreConfig
) -> tuple[PartitionOperatorConfig, str] | None:
    """The operator that owns this episode's recorded layout, and the label value it applies
    (None: the node is host-managed, had no partitions, or operators are turned off). The
    labels recorded with the layout come first; an operator configured after the record was
    made is found by the Node's labels now."""
    if not restore.through_operator or not needs_restore(view, ep):
        return None
    recorded = (record(view) or {}).get("labels") or {}
    for op in restore.operators:
        value = recorded.get(op.config_label) or view.labels.get(op.config_label)
        if value:
            return op, str(value)
    return None


def handoff(view: NodeView, request_id: str) -> dict[str, Any] | None:
    """This request's recorded trigger (``{"rid", "pod", "at"}``), or None: not triggered."""
    h = (record(view) or {}).get("handoff")
    return h if isinstance(h, dict) and h.get("rid") == request_id else None


def with_handoff(raw: str | None, trigger: dict[str, Any]) -> str | None:
    """The record annotation ``raw`` with ``trigger`` kept in it (None: no record there)."""
    try:
        rec = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("layout"), dict):
        return None
    return json.dumps({**rec, "handoff": trigger}, separators=(",", ":"))


def operator_state(op: PartitionOperatorConfig, labels: Mapping[str, str]) -> str:
    """``success``, ``failure`` or ``waiting`` from the operator's state label."""
    state = labels.get(op.state_label)
    if state == op.success:
        return "success"
    return "failure" if state in op.failure else "waiting"


def operator_note(op: PartitionOperatorConfig, value: str, waited: float, stdout: str) -> str:
    """The history's line for an operator restore that passed and read back the record."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        data = json.loads(line)
    except ValueError:
        data = {}
    after = data.get("after", "?") if isinstance(data, dict) else "?"
    applied = f"{op.name} applied {op.config_label}={value} ({op.success} in {waited:.0f}s)"
    return f"restore: {applied}; after: {after}"
