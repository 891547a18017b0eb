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

Pure: decoding and deciding only.
"""

from __future__ import annotations

import json
from typing import Any

from fleetmedic.model import keys
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
    verb = "applied" if data.get("applied") else "already in place"
    return f"restore: {verb}; before: {data.get('before', '?')}; after: {data.get('after', '?')}"
