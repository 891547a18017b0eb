"""Turn one kernel (or pod) message into a classification, using the catalog.

:func:`classify` is pure: a message string in, a :class:`Classified` (a
:class:`~fleetmedic.scan.finding.Finding` that has no line number, time or boot
yet: the scanner fills those in) or ``None`` (not a GPU fault) out. It never
raises on any input. The order:

1. an NVIDIA Xid line -> the Xid table (Xid 154 by its hex recovery action,
   Xid 144-150 by the NVLink 5 decode table);
2. an NVSwitch SXid line -> the SXid table and the printed severity;
3. otherwise the message rules (``nvrm``, ``amdgpu``, ``nccl``, ``cuda``, and the
   families derived from the driver sources) whose ``requires`` literal occurs in the
   message; first match wins.

The driver's own words decide first: where a line states its severity (an SXid's
``Fatal`` / ``Non-fatal`` / ``Correctable``, an NVLink 5 Xid's ``Fatal`` / ``Nonfatal``,
Xid 94/95's ``RST: Yes``, Xid 154's recovery action, the status code of a failed GSP
RPC), that word sets the action's floor; the catalog may raise it (each raise says why)
but never lower a fence the driver's word calls for.
"""

from __future__ import annotations

from typing import Any

from fleetmedic.model.actions import FENCING_ACTIONS
from fleetmedic.scan import nvidia, regexcache
from fleetmedic.scan import pci as pcimod
from fleetmedic.scan.catalog import Catalog, Rule
from fleetmedic.scan.finding import ACTION_RANK, Finding

XID154 = 154
NVLINK5 = range(144, 151)
RESET_WORDS_XIDS = (94, 95)
"""Xids whose line says ``RST: Yes`` / ``D-RST: Yes`` when the GPU needs a reset (NVIDIA's
memory error management guide: contained and uncontained memory errors)."""
_STATUS = regexcache.compile(r"\bstatus[= ](?:0x)?(?P<status>[0-9a-fA-F]{1,8})\b")

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
    if xid.code in RESET_WORDS_XIDS and entry is not None:
        said = nvidia.reset_words(xid.text)
        action = entry.action if said is None else _stronger(entry.action, "reset")
        rule = f"xid.{xid.code}" if said is None else f"xid.{xid.code}.{said.lower()}"
        return _classified(**base, action=action, bucket=entry.immediate, rule=rule)
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
    """Action, bucket and rule id of an Xid 144-150 line (see ``nvlink5`` in the catalog).

    The printed ``Fatal``/``Nonfatal`` is the floor. An errorStatus the decode sheet does
    not list as a whole is decoded bit by bit (the worst listed bit wins): the hardware
    sets one bit per error, and several errors can be reported in one interrupt."""
    unit, severity, regs = nvidia.nvlink5_fields(xid.text)
    by_word = catalog.nvlink5_severity_actions.get(severity or "", "monitor")
    row = catalog.nvlink5.get((xid.code, unit or "")) or catalog.nvlink5.get((xid.code, "*"))
    if row is not None:
        status = regs[1] if len(regs) > 1 else None
        bucket = _decode_status(row, status, severity, catalog)
        if bucket is not None:
            action = catalog.nvlink5_bucket_actions[bucket]
            if severity == "fatal":  # the driver's word is the floor
                action = _stronger(action, by_word)
            return action, bucket, f"xid.{xid.code}.{unit}"
    return by_word, "WORKFLOW_NVLINK5_ERR", f"xid.{xid.code}.undecoded"


def _decode_status(
    row: Any, status: int | None, severity: str | None, catalog: Catalog
) -> str | None:
    def one(value: int) -> str | None:
        bucket = row.status.get(value)
        if bucket == "IGNORE" and severity == "fatal" and value in row.promotable:
            return "RESET_GPU"
        return bucket

    if status is None:
        return row.default
    bucket = one(status)
    if bucket is None and status:
        bits = [one(1 << b) for b in range(32) if status >> b & 1]
        known = [b for b in bits if b is not None]
        if known and len(known) == len(bits):
            ranks = catalog.nvlink5_bucket_actions
            bucket = max(known, key=lambda b: ACTION_RANK[ranks[b]])
    return bucket if bucket is not None else row.default


def _classify_sxid(sxid: nvidia.SxidLine, catalog: Catalog) -> Classified:
    """The driver's word on the line first (``Fatal``, ``Non-fatal``, ``Correctable``, or
    the ``Severity N`` of the event's engine line); without one, the severity the Fabric
    Manager guide gives the code, then the one the NVSwitch driver prints it with. A fatal
    word takes the guide's rung for the code when that is stronger (always fatal)."""
    entry = catalog.sxids.get(sxid.code)
    printed = catalog.sxid_printed.get(sxid.severity or "")
    if printed is not None:
        action = catalog.sxid_severity_actions[printed]
    elif entry is not None:
        action = catalog.sxid_severity_actions[entry.severity]
    elif sxid.code in catalog.driver_sxids:
        action = catalog.sxid_severity_actions[catalog.driver_sxids[sxid.code][1]]
    else:
        action = catalog.unknown_sxid_action
    if entry is not None:
        if printed is None:
            action = entry.action
        elif entry.code in catalog.sxid_raise_reasons:
            action = _stronger(action, entry.action)  # a raise the catalog explains
        elif action in FENCING_ACTIONS:
            # a fatal word meets its table: Table 23's "always fatal to the entire fabric"
            # (the host restarted) is stronger than the word "Fatal" the driver prints
            action = _stronger(action, entry.action)
        elif entry.action == "none" and action == "monitor":
            action = "none"  # the guide says this non-fatal one can be ignored
    text = sxid.text or (entry.name if entry else "")
    known = entry is not None or sxid.code in catalog.driver_sxids
    return _classified(
        vendor="nvidia",
        kind="sxid",
        code=sxid.code,
        pci=sxid.pci,
        action=action,
        bucket=None,
        message=text,
        rule=f"sxid.{sxid.code}" if known else "sxid.unknown",
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
    action = rule.action
    if rule.by_status:
        said = _STATUS.search(message, match.start())
        if said is not None:
            value = int(said.group("status"), 16)
            action = rule.by_status.get(value, rule.status_default or rule.action)
    return _classified(
        vendor=rule.vendor,
        kind=rule.kind,
        code=code,
        pci=pci,
        action=action,
        bucket=rule.bucket,
        message=message.strip(),
        rule=rule.id,
        pid=int(pid_text) if pid_text and pid_text.isdigit() and int(pid_text) > 0 else None,
        process=(groups.get("process") or "").strip() or None,
        dedup_kind=same_kind,
        dedup_code=same_code,
    )
