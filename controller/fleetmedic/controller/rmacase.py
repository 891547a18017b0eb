"""The RMA case of a lemon: one JSON file per GPU, beside the node's evidence bundles, in
the shape a vendor's RMA intake asks for, attached to the escalation email and sent as
the ticket.

What it holds (NVIDIA's RMA intake and NVIDIA support's asks, AMD's likewise):

- the node (name, cluster, address, vendor) and the GPU: serial, UUID or unique id, PCI
  address, model, and what the tools read at the case phase: board part number, InfoROM
  and VBIOS versions, retired pages and remapped rows (NVIDIA); RAS error counts per
  block, bad pages, VBIOS (AMD);
- the GPU's fault history across episodes and nodes, with times (the node's record and
  the controller's store), and the rule that made it a candidate (family, count, window,
  the published guidance it rests on);
- the vendor diagnostics run into the case (DCGM or RVS, ``ladder.lemon.rma.diag_level``)
  and where the bundles are (``nvidia-bug-report.log``, ``amd-smi static``/``metric``, the
  kernel log), and the BMC's event log when a ``bmc:`` section reaches it.

Each file is capped (``ladder.lemon.rma.max_file_mb``): past the cap the bulkiest parts
(every test's per-GPU rows, the attempts) are left out with a note, never the identity or
the history.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetmedic.adapters import runner
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.config.lemon import defaults as families
from fleetmedic.model.gpufacts import GpuReport
from fleetmedic.model.gpus import FleetHistory, NodeRecord, merge
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import lemon
from fleetmedic.policy.actions import Outcome
from fleetmedic.policy.escalation import shown_message
from fleetmedic.policy.history import decode, of_episode, stamp
from fleetmedic.policy.rmaflow import RmaRecord

log = logging.getLogger(__name__)

KIND = "fleetmedic.io/rma-case/v1"
SOURCES_FILE = "lemon_rules.yaml"
DROP_ORDER = ("diagnostics_detail", "attempts", "vendor_facts_detail")
"""What goes first when a case is over its cap (identity and history never go)."""


def path_for(cfg: Config, node: str, ep: int, gpu: Mapping[str, Any]) -> Path:
    """``<evidence_dir>/<node>/<node>-e<ep>-rma-<serial>.json``: named like the episode's
    bundles, so the escalation email attaches it with them."""
    ident = "".join(
        c if c.isalnum() or c in "-_." else "_" for c in str(gpu.get("serial") or gpu.get("uid"))
    )
    return cfg.ansible.evidence_dir / node / f"{node}-e{ep}-rma-{ident or 'unknown'}.json"


def write(
    cfg: Config,
    view: NodeView,
    outcome: Outcome,
    fleet: FleetHistory | None,
    ep: int,
    cluster: str = "",
    record: RmaRecord | None = None,
) -> list[Path]:
    """Write one case file per candidate GPU of the RMA record (``record``, else the
    node's); the paths written (a file that cannot be written is logged and left out: the
    email says the case is missing rather than the escalation failing)."""
    record = record or RmaRecord.decode(view.annotations.get(keys.ANN_RMA))
    if record is None:
        return []
    report = lemon.report_of(outcome.data, view.name)
    cap = int(cfg.ladder.lemon.rma.max_file_mb * 2**20)
    out = []
    for gpu in record.gpus:
        case = build(cfg, view, record, gpu, report, outcome, fleet, ep, cluster)
        path = path_for(cfg, view.name, ep, gpu)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.part")
            tmp.write_text(capped(case, cap))
            os.chmod(tmp, 0o640)
            os.replace(tmp, path)
        except OSError as exc:
            log.error("%s: RMA case %s not written: %s", view.name, path, exc.strerror or exc)
            continue
        out.append(path)
    return out


def build(
    cfg: Config,
    view: NodeView,
    record: RmaRecord,
    gpu: Mapping[str, Any],
    report: GpuReport | None,
    outcome: Outcome,
    fleet: FleetHistory | None,
    ep: int,
    cluster: str,
) -> dict[str, Any]:
    key = str(gpu.get("uid") or gpu.get("serial") or "")
    node_rec = NodeRecord.decode(view.annotations.get(keys.ANN_GPUS))
    history = merge(
        [i for i in node_rec.incidents if i.key == key],
        fleet.of(key) if fleet is not None else (),
    )
    facts = next(
        (
            g
            for g in (report.gpus if report else ())
            if (g.uid and g.uid == gpu.get("uid")) or (g.serial and g.serial == gpu.get("serial"))
        ),
        None,
    )
    family = families().get(str(gpu.get("family")))
    diag = outcome.data.get("fleetmedic_diag")
    diag_for_host = diag.get(view.name) if isinstance(diag, Mapping) else None
    attempts = [
        {**a.to_json(), "message": shown_message(a.message, a.phase)}
        for a in of_episode(decode(view.annotations.get(keys.ANN_HISTORY)), ep)
    ]
    bundles = runner.evidence_for(view.name, cfg.ansible, episode=ep)
    serial = gpu.get("serial") or gpu.get("uid")
    return {
        "kind": KIND,
        "case_id": record.case_id,
        "created": stamp(datetime.now(UTC)),
        "recommendation": f"RMA candidate: GPU {serial}",
        "summary": record.summary,
        "node": {
            "name": view.name,
            "cluster": cluster or None,
            "address": view.address,
            "vendor": view.vendor,
            "facts": dict(report.node) if report else {},
        },
        "gpu": {
            "serial": gpu.get("serial") or None,
            "uuid" if view.vendor != "amd" else "unique_id": gpu.get("uid") or None,
            "index": gpu.get("index"),
            "pci": facts.pci if facts else None,
            "model": facts.model if facts else None,
            "signals_now": list(facts.signals) if facts else [],
            "vendor_facts": dict(facts.rma) if facts else {},
        },
        "rule": {
            "family": gpu.get("family"),
            "episodes": gpu.get("count"),
            "window_seconds": gpu.get("window"),
            "description": family.description if family else None,
            "why": family.why if family else None,
            "sources": list(family.source) if family else [],
        },
        "history": [i.to_json() for i in history],
        "diagnostics": {
            "level": cfg.ladder.lemon.rma.diag_level,
            "phase": outcome.status,
            "message": outcome.message or None,
            "result": _diag_summary(diag_for_host),
            "diagnostics_detail": diag_for_host,
        },
        "attempts": attempts,
        "evidence": {
            "host": os.uname().nodename,
            "bundles": bundles,
            "bmc_sel": next((b for b in bundles if b.endswith("-sel.json")), None),
        },
        "tools_not_read": list(report.problems)
        if report
        else ["no GPU report from the case phase"],
    }


def _diag_summary(diag: Any) -> Any:
    if not isinstance(diag, Mapping):
        return None
    return {k: diag.get(k) for k in ("status", "summary", "level", "tool", "version") if k in diag}


def capped(case: dict[str, Any], cap: int) -> str:
    """The case as JSON of at most ``cap`` bytes (see :data:`DROP_ORDER`)."""
    text = json.dumps(case, indent=2, default=str)
    for part in DROP_ORDER:
        if len(text.encode()) <= cap:
            return text
        if part == "diagnostics_detail":
            case["diagnostics"]["diagnostics_detail"] = "left out: over the case's size cap"
        elif part == "attempts":
            case["attempts"] = case["attempts"][-3:]
        else:
            case["gpu"]["vendor_facts"] = "left out: over the case's size cap"
        text = json.dumps(case, indent=2, default=str)
    while len(text.encode()) > cap and len(case["history"]) > 1:
        case["history"] = case["history"][1:]  # the oldest episodes first
        case["history_note"] = "older episodes left out: over the case's size cap"
        text = json.dumps(case, indent=2, default=str)
    if len(text.encode()) > cap:  # still over: no pretty-printing
        text = json.dumps(case, separators=(",", ":"), default=str)
    return text
