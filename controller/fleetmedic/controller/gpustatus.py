"""The GPUs' side of ``fleetmedic status`` and ``fleetmedic history``: repeat offenders and
each GPU's fault history (model/gpus.py), from the Node's record and the controller's
store. Pure: views and the store's history in, rows out."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.config.lemon import LemonConfig
from fleetmedic.model.gpus import FleetHistory, Gpu, Incident, NodeRecord, merge
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import lemon
from fleetmedic.policy.rmaflow import RmaRecord


def repeats(
    v: NodeView, at: datetime, cfg: LemonConfig | None = None, fleet: FleetHistory | None = None
) -> list[dict[str, Any]]:
    """The node's GPUs with two or more episodes of one fault in a chain (status)."""
    record = NodeRecord.decode(v.annotations.get(keys.ANN_GPUS))
    found = lemon.repeat_offenders(record, at, cfg or LemonConfig(), fleet)
    return [
        {
            "gpu": g.index if g else None,
            "serial": (g.serial or g.uid) if g else None,
            "family": family,
            "episodes": n,
        }
        for g, family, n in found
    ]


def rma_of(v: NodeView) -> dict[str, Any] | None:
    """The node's RMA case, as status shows it (None: none)."""
    rec = RmaRecord.decode(v.annotations.get(keys.ANN_RMA))
    if rec is None:
        return None
    return {
        "ep": rec.ep,
        "summary": rec.summary,
        "serials": [g.get("serial") or g.get("uid") for g in rec.gpus],
        "ticket": rec.ticket,
        "ticket_id": rec.ticket_id or None,
        "ticket_error": rec.ticket_error or None,
    }


def cell(row: dict[str, Any]) -> str:
    """``GPU1 x3 bus-loss; RMA (ticket sent)``: status's GPU REPEATS column."""
    parts = [
        f"GPU{r['gpu'] if r['gpu'] is not None else '?'} x{r['episodes']} {r['family']}"
        for r in row.get("repeat_gpus") or ()
    ]
    rma = row.get("rma")
    if rma:
        parts.append(f"RMA (ticket {rma['ticket']})")
    return "; ".join(parts)


def history_rows(v: NodeView, node: dict, fleet: FleetHistory | None) -> list[dict[str, Any]]:
    """``history``'s rows of the node's GPUs: every incident of each GPU now in the node
    (on this node or any other), newest first, source ``gpu``."""
    record = NodeRecord.decode(v.annotations.get(keys.ANN_GPUS))
    mine = {g.key: g for g in record.gpus if g.key}
    incidents = merge(
        record.incidents, [i for i in (fleet.all() if fleet else ()) if i.key in mine]
    )
    rows = [_row(i, mine.get(i.key), v.name) for i in incidents]
    return sorted(rows, key=lambda r: str(r["at"]), reverse=True)


def _row(i: Incident, gpu: Gpu | None, here: str) -> dict[str, Any]:
    where = "" if i.node == here else f" on {i.node}"
    label = gpu.label() if gpu else f"GPU (SN {i.serial or i.uid})"
    return {
        "at": i.at,
        "source": "gpu",
        "what": f"{label}: episode {i.ep}{where}",
        "result": i.family,
        "message": i.why,
        "by": "fleetmedic",
        "run_id": None,
        "gpu": {"serial": i.serial, "uid": i.uid, "index": i.index, "node": i.node},
    }


def gpu_table(v: NodeView, fleet: FleetHistory | None) -> list[str]:
    """``history``'s per-GPU summary lines: each GPU of the node, its identity and its
    episodes by fault (all nodes)."""
    record = NodeRecord.decode(v.annotations.get(keys.ANN_GPUS))
    if not record.gpus:
        return []
    incidents = merge(record.incidents, fleet.all() if fleet else ())
    lines = ["GPUs (by identity, across nodes):"]
    for g in sorted(record.gpus, key=lambda g: g.index):
        own = [i for i in incidents if g.key and i.key == g.key]
        fams: dict[str, int] = {}
        for i in own:
            fams[i.family] = fams.get(i.family, 0) + 1
        said = ", ".join(f"{f} x{n}" for f, n in sorted(fams.items())) or "no incidents"
        last = f", last {own[-1].at} on {own[-1].node}" if own else ""
        lines.append(
            f"  GPU {g.index}  {g.pci or '?':<13} SN {g.serial or '?':<16} "
            f"{g.uid or '?'}  {said}{last}"
        )
    return lines
