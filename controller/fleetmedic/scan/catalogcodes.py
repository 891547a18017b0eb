"""The catalog's code tables: NVIDIA Xids (with Xid 154's recovery actions and the
NVLink5 decode table) and NVSwitch SXids (with the severity each prints)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetmedic.model.actions import FENCING_ACTIONS
from fleetmedic.scan.catalogfiles import (
    TRIGGER_NVRM,
    checked_action,
    cited,
    compiled,
    fail,
    hex_value,
    source_list,
)
from fleetmedic.scan.catalogrules import load_rules
from fleetmedic.scan.entries import Nvlink5Row, SxidEntry, XidEntry
from fleetmedic.scan.finding import ACTION_RANK


def load_xids(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    sources = data["sources"]
    buckets = {
        str(k): checked_action(name, {"id": k}, v) for k, v in data["bucket_actions"].items()
    }
    xids: dict[int, XidEntry] = {}
    for entry in data["xids"]:
        code = int(entry["code"])
        if code in xids:
            raise fail(name, f"Xid {code} is listed twice")
        xids[code] = XidEntry(
            code,
            str(entry["mnemonic"]),
            str(entry["description"]),
            entry.get("immediate"),
            entry.get("investigatory"),
            checked_action(name, entry, entry["action"]),
            entry.get("why"),
            cited(name, entry, sources),
        )
    x154 = data["xid154"]
    cited(name, {"id": "xid154", **x154}, sources)
    actions154 = {
        hex_value(k): (str(v["name"]), checked_action(name, {"id": f"xid154 {k}"}, v["action"]))
        for k, v in x154["recovery_actions"].items()
    }
    nvl = data["nvlink5"]
    cited(name, {"id": "nvlink5", **nvl}, sources)
    nvl_buckets = {
        str(k): checked_action(name, {"id": k}, v) for k, v in nvl["bucket_actions"].items()
    }
    decode: dict[tuple[int, str], Nvlink5Row] = {}
    for row in nvl["decode"]:
        status = {hex_value(k): str(v) for k, v in (row.get("status") or {}).items()}
        for bucket in [*status.values(), row.get("default")]:
            if bucket is not None and bucket not in nvl_buckets:
                raise fail(
                    name, f"nvlink5 row {row['xid']} uses bucket {bucket!r} without an action"
                )
        parsed = Nvlink5Row(
            status, row.get("default"), frozenset(hex_value(p) for p in row.get("promotable", ()))
        )
        for unit in row["units"]:
            decode[(int(row["xid"]), str(unit).upper())] = parsed
    return {
        "xids": xids,
        "bucket_actions": buckets,
        "unknown_xid_action": checked_action(
            name, {"id": "unknown_xid_action"}, data["unknown_xid_action"]
        ),
        "xid154_actions": actions154,
        "xid154_unknown_action": checked_action(name, {"id": "xid154"}, x154["unknown_action"]),
        "nvlink5": decode,
        "nvlink5_bucket_actions": nvl_buckets,
        "nvlink5_severity_actions": {
            str(k): checked_action(name, {"id": k}, v) for k, v in nvl["severity_actions"].items()
        },
        "rules": load_rules(name, data.get("nvrm", ()), sources, "nvidia", "nvrm", TRIGGER_NVRM),
    }


def load_sxids(name: str, data: Mapping[str, Any], read: Mapping[str, Any]) -> dict[str, Any]:
    sources = data["sources"]
    severities = {
        str(k): checked_action(name, {"id": k}, v) for k, v in data["severity_actions"].items()
    }
    sxids: dict[int, SxidEntry] = {}
    raises: dict[int, str] = {}
    for entry in data["sxids"]:
        code = int(entry["code"])
        if code in sxids:
            raise fail(name, f"SXid {code} is listed twice")
        severity = str(entry["severity"])
        if severity not in severities:
            raise fail(name, f"SXid {code} has unknown severity {severity!r}")
        floor = severities[severity]
        action = checked_action(name, entry, entry.get("action", floor))
        if action != floor and not entry.get("why"):
            raise fail(name, f"SXid {code} departs from its severity's action without a `why`")
        if ACTION_RANK[action] < ACTION_RANK[floor] and floor in FENCING_ACTIONS:
            raise fail(
                name,
                f"SXid {code} action {action!r} is below its severity's {floor!r}: "
                "an entry may raise the driver's word, never lower a fence",
            )
        if ACTION_RANK[action] > ACTION_RANK[floor]:
            raises[code] = str(entry["why"])
        sxids[code] = SxidEntry(
            code,
            str(entry["name"]),
            severity,
            action,
            entry.get("why"),
            cited(name, entry, sources),
        )
    printed = {str(k).lower(): str(v) for k, v in data["printed_severity"].items()}
    for word, severity in printed.items():
        if severity not in severities:
            raise fail(name, f"printed severity {word!r} maps to unknown {severity!r}")
    driver: dict[int, tuple[str, str]] = {}
    if data.get("driver_list"):
        listed = source_list(read, str(data["driver_list"]))
        for row in next(iter(listed.values())).get("sxids") or ():
            said = printed.get(str(row["severity"]).lower())
            if said is not None:
                driver[int(row["code"])] = (str(row["name"]), said)
    return {
        "sxids": sxids,
        "sxid_severity_actions": severities,
        "sxid_printed": printed,
        "unknown_sxid_action": checked_action(
            name, {"id": "unknown_sxid_action"}, data["unknown_sxid_action"]
        ),
        "sxid_parts": {
            str(k): compiled(name, {"id": f"parts.{k}"}, v)
            for k, v in (data.get("parts") or {}).items()
        },
        "driver_sxids": driver,
        "sxid_raise_reasons": raises,
    }
