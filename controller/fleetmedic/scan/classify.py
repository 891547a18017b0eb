"""Turn one kernel (or pod) message into a classification, using the catalog.

:func:`classify` is pure: a message string in, a :class:`Classified` (a
:class:`~fleetmedic.scan.finding.Finding` that has no line number, time or boot
yet: the scanner fills those in) or ``None`` (not a GPU fault) out. It never
raises on any input. The order:

1. an NVIDIA Xid line -> the Xid table (Xid 154 by its hex recovery action,
   Xid 144-150 by the NVLink 5 decode table);
2. an NVSwitch SXid line -> the SXid table and the printed severity;
3. otherwise the message rules (``nvrm``, ``amdgpu``, ``nccl``, ``cuda``)
   whose ``requires`` literal occurs in the message; first match wins.
"""

from __future__ import annotations

from typing import Any

from fleetmedic.scan import nvidia
from fleetmedic.scan import pci as pcimod
from fleetmedic.scan.catalog import Catalog, Rule
from fleetmedic.scan.finding import ACTION_RANK, Finding

XID154 = 154
NVLINK5 = range(144, 151)

Classified = Finding
"""What a message means: a :class:`Finding` with ``line`` 0 and no timestamp or boot
(the scanner sets those with :func:`dataclasses.replace`)."""


def _classified(**fields: Any) -> Finding:
    return Finding(line=0, **fields)


def _stronger(a: str, b: str) -> str:
    return a if ACTION_RANK[a] >= ACTION_RANK[b] else b


def classify(message: str, catalog: Catalog) -> Classified | None:
    """Classify one message (the text after the log prefix) or return ``None``."""
    xid = nvidia.parse_xid(message)
    if xid is not None:
        return _classify_xid(xid, catalog)
    sxid = nvidia.parse_sxid(message)
    if sxid is not None:
        return _classify_sxid(sxid, catalog)
    for rule in catalog.rules_for(message):
        found = _apply(rule, message)
        if found is not None:
            return found
    return None


def _classify_xid(xid: nvidia.XidLine, catalog: Catalog) -> Classified:
    entry = catalog.xids.get(xid.code)
    text = xid.text or (entry.description if entry else "")
    base: dict[str, Any] = dict(
        vendor="nvidia",
        kind="xid",
        code=xid.code,
        pci=xid.pci,
        message=text,
        pid=xid.pid,
        process=xid.process,
    )
    if xid.code == XID154:
        value = nvidia.recovery_action(xid.text)
        known = catalog.xid154_actions.get(value) if value is not None else None
        if known is None:
            return _classified(
                **base,
                action=catalog.xid154_unknown_action,
                bucket="XID_154",
                rule="xid.154.unknown",
            )
        return _classified(**base, action=known[1], bucket="XID_154", rule=f"xid.154.0x{value:x}")
    if entry is None:
        return _classified(
            **base, action=catalog.unknown_xid_action, bucket=None, rule="xid.unknown"
        )
    if xid.code in NVLINK5:
        action, bucket, rule = _nvlink5(xid, catalog)
        return _classified(**base, action=action, bucket=bucket, rule=rule)
    return _classified(**base, action=entry.action, bucket=entry.immediate, rule=f"xid.{xid.code}")


def _nvlink5(xid: nvidia.XidLine, catalog: Catalog) -> tuple[str, str, str]:
    """Action, bucket and rule id of an Xid 144-150 line (see ``nvlink5`` in the catalog)."""
    unit, severity, regs = nvidia.nvlink5_fields(xid.text)
    by_word = catalog.nvlink5_severity_actions.get(severity or "", "monitor")
    row = catalog.nvlink5.get((xid.code, unit or "")) or catalog.nvlink5.get((xid.code, "*"))
    if row is not None:
        status = regs[1] if len(regs) > 1 else None
        bucket = row.status.get(status) if status is not None else None
        if bucket is None:
            bucket = row.default
        if bucket is not None:
            if bucket == "IGNORE" and severity == "fatal" and status in row.promotable:
                bucket = "RESET_GPU"
            return catalog.nvlink5_bucket_actions[bucket], bucket, f"xid.{xid.code}.{unit}"
    return by_word, "WORKFLOW_NVLINK5_ERR", f"xid.{xid.code}.undecoded"


def _classify_sxid(sxid: nvidia.SxidLine, catalog: Catalog) -> Classified:
    entry = catalog.sxids.get(sxid.code)
    printed = catalog.sxid_printed.get(sxid.severity or "")
    if entry is not None:
        action = entry.action
    elif printed is not None:
        action = catalog.sxid_severity_actions[printed]
    else:
        action = catalog.unknown_sxid_action
    if printed is not None and printed != "non_fatal":
        # The driver says fatal: never act less than the severity demands.
        action = _stronger(action, catalog.sxid_severity_actions[printed])
    text = sxid.text or (entry.name if entry else "")
    return _classified(
        vendor="nvidia",
        kind="sxid",
        code=sxid.code,
        pci=sxid.pci,
        action=action,
        bucket=None,
        message=text,
        rule=f"sxid.{sxid.code}" if entry else "sxid.unknown",
    )


def _apply(rule: Rule, message: str) -> Classified | None:
    match = rule.match.search(message)
    if match is None or (rule.unless is not None and rule.unless.search(message)):
        return None
    groups = match.groupdict()
    pci = pcimod.normalize(groups.get("pci")) if groups.get("pci") else pcimod.find(message)
    pid_text = groups.get("pid")
    code_text = groups.get("code")
    code = int(code_text) if code_text and code_text.isdigit() else rule.code
    same_kind, same_code = rule.same_as or ("", "")
    return _classified(
        vendor=rule.vendor,
        kind=rule.kind,
        code=code,
        pci=pci,
        action=rule.action,
        bucket=rule.bucket,
        message=message.strip(),
        rule=rule.id,
        pid=int(pid_text) if pid_text and pid_text.isdigit() and int(pid_text) > 0 else None,
        process=(groups.get("process") or "").strip() or None,
        dedup_kind=same_kind,
        dedup_code=same_code,
    )
