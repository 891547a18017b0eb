"""NVSentinel's ExternalRemediationRequest (ERR), read and answered: pure.

:func:`read` turns an ERR (the API's JSON) into a :class:`Request`; :func:`answer` turns its
HealthEvent into fleetmedic's terms: the rung to start at, the GPUs a reset is for, and the
finding the node's record and the escalation email show. What the controller then does
with a request and its node is policy/handoff.py.

How a HealthEvent maps (docs/nvsentinel.md has the table):

- ``recommendedAction`` (a name or its protobuf number: the CRD accepts both):
  COMPONENT_RESET -> ``reset`` of the GPUs in ``entitiesImpacted``; RESTART_VM, RESTART_BM
  -> ``reboot``; REPLACE_VM -> ``replace`` (a ladder without that rung goes on to
  ``manual``); RUN_FIELDDIAG, RUN_DCGMEUD -> ``diagnose``; CONTACT_SUPPORT -> ``diagnose``,
  then ``manual`` (the diagnostics become the evidence the human gets); CUSTOM -> by
  ``customRecommendedAction`` (config ``nvsentinel.custom_actions``); NONE, UNKNOWN -> none.
- ``errorCode``: Xid and SXid numbers through fleetmedic's catalog (so its workflows apply),
  NVSentinel's ``GPU_FALLEN_OFF_BUS`` as Xid 79 (as NVSentinel #155 and gpud count it).
- fences only go up: the strongest of the two wins; with neither, ``isFatal`` says
  ``reboot``, else ``diagnose`` (look closer before touching the node).

NVSentinel's tutorial template copies only single-valued fields into the ERR, so an ERR
made from it has no ``errorCode`` nor ``entitiesImpacted``: such a request is answered from
its recommendedAction and isFatal alone, and a reset then resets every GPU of the node.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fleetmedic.model.actions import fence_state
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.scan.catalog import Catalog

RELEASED = "NVSentinelOwnershipReleased"  # NVSentinel's condition: the node is handed over
COMPLETE = "ExternalRemediationComplete"  # the remediator's: True hands the node back

ACTION_NAMES = {
    0: "NONE",
    2: "COMPONENT_RESET",
    5: "CONTACT_SUPPORT",
    6: "RUN_FIELDDIAG",
    15: "RESTART_VM",
    24: "RESTART_BM",
    25: "REPLACE_VM",
    26: "RUN_DCGMEUD",
    27: "CUSTOM",
    99: "UNKNOWN",
}
"""NVSentinel's RecommendedAction enum (data-models/protobufs/health_event.proto)."""

RUNG_OF_ACTION: dict[str, str | None] = {
    "NONE": None,
    "UNKNOWN": None,
    "COMPONENT_RESET": "reset",
    "RESTART_VM": "reboot",
    "RESTART_BM": "reboot",
    "REPLACE_VM": "replace",
    "RUN_FIELDDIAG": "diagnose",
    "RUN_DCGMEUD": "diagnose",
    "CONTACT_SUPPORT": "diagnose",
}
THEN_MANUAL = ("CONTACT_SUPPORT",)
"""Actions that end with a human whatever the diagnostics say: they run first, for evidence."""

FALLEN_OFF_BUS = "GPU_FALLEN_OFF_BUS"  # syslog-health-monitor's code for a GPU gone without Xid
_XID = re.compile(r"^(?:XID[-_ ]?)?(\d{1,3})(?:\.\w+)?$", re.IGNORECASE)
_SXID = re.compile(r"^SXID[-_ ]?(\d{1,5})$", re.IGNORECASE)
_DIGITS = re.compile(r"^\d{1,5}$")


@dataclasses.dataclass(frozen=True)
class HealthEvent:
    """The parts of NVSentinel's HealthEvent (``spec.healthEvent``) fleetmedic reads."""

    node: str = ""
    id: str = ""
    agent: str = ""
    check: str = ""
    component: str = ""
    message: str = ""
    fatal: bool = False
    action: str = "NONE"  # RecommendedAction by name
    custom: str = ""  # customRecommendedAction
    codes: tuple[str, ...] = ()  # errorCode
    entities: tuple[tuple[str, str], ...] = ()  # (entityType, entityValue)


@dataclasses.dataclass(frozen=True)
class Condition:
    type: str
    status: str  # True | False | Unknown
    reason: str = ""
    message: str = ""
    since: str = ""  # lastTransitionTime


@dataclasses.dataclass(frozen=True)
class Request:
    """One ERR as the controller reads it."""

    name: str
    uid: str
    generation: int
    event: HealthEvent
    conditions: tuple[Condition, ...] = ()
    completion_time: str | None = None
    deleting: bool = False

    @property
    def node(self) -> str:
        return self.event.node

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def released(self) -> bool:
        """NVSentinel released the node (its janitor set NVSentinelOwnershipReleased=True)."""
        c = self.condition(RELEASED)
        return c is not None and c.status == "True"

    @property
    def complete(self) -> Condition | None:
        return self.condition(COMPLETE)


def read(obj: Mapping[str, Any]) -> Request:
    """An ERR from the API's JSON. Tolerant: a missing or odd field reads as empty (a request
    without a node name is then one fleetmedic answers with nothing)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    he = spec.get("healthEvent") or {}
    return Request(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        generation=_int(meta.get("generation")),
        event=HealthEvent(
            node=str(he.get("nodeName") or ""),
            id=str(he.get("id") or ""),
            agent=str(he.get("agent") or ""),
            check=str(he.get("checkName") or ""),
            component=str(he.get("componentClass") or ""),
            message=str(he.get("message") or ""),
            fatal=he.get("isFatal") is True,
            action=action_name(he.get("recommendedAction")),
            custom=str(he.get("customRecommendedAction") or ""),
            codes=tuple(str(c) for c in _list(he.get("errorCode")) if str(c).strip()),
            entities=tuple(
                (str(e.get("entityType") or ""), str(e.get("entityValue") or ""))
                for e in _list(he.get("entitiesImpacted"))
                if isinstance(e, Mapping)
            ),
        ),
        conditions=tuple(
            Condition(
                type=str(c.get("type") or ""),
                status=str(c.get("status") or ""),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
                since=str(c.get("lastTransitionTime") or ""),
            )
            for c in _list(status.get("conditions"))
            if isinstance(c, Mapping)
        ),
        completion_time=status.get("completionTime") or None,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def action_name(value: Any) -> str:
    """A RecommendedAction by name, from its name or number (the CRD takes either)."""
    if isinstance(value, bool):
        return "UNKNOWN"
    if isinstance(value, int):
        return ACTION_NAMES.get(value, "UNKNOWN")
    text = str(value or "NONE").strip().upper()
    if text.isdigit():
        return ACTION_NAMES.get(int(text), "UNKNOWN")
    return text if text in ACTION_NAMES.values() else "UNKNOWN"


@dataclasses.dataclass(frozen=True)
class Answer:
    """What fleetmedic makes of one HealthEvent."""

    rung: str  # the repair state to fence at (the pool's ladder may start higher)
    then: str | None  # a rung to go on to once the first ends in a pass (CONTACT_SUPPORT)
    gpus: tuple[str, ...]  # what a reset is for (GPU UUIDs, PCI bus ids or indexes); (): all
    why: str  # how the rung was chosen, one line
    finding: dict[str, Any]  # the node's last-finding: what status and the email show


def answer(
    event: HealthEvent, catalog: Catalog, custom_actions: Mapping[str, str | None]
) -> Answer:
    """The rung, targets and finding for ``event`` (see the module docstring)."""
    reasons: list[str] = []
    asked = _asked_rung(event, custom_actions, reasons)
    found, xids = _catalog_rung(event.codes, event.check, catalog, reasons)
    candidates = [r for r in (asked, found) if r]
    if candidates:
        rung = max(candidates, key=REPAIR_STATES.index)
    else:
        rung = "reboot" if event.fatal else "diagnose"
        reasons.append(f"isFatal {str(event.fatal).lower()}: {rung}")
    then = "manual" if event.action in THEN_MANUAL and rung != "manual" else None
    gpus = _gpus(event.entities) if rung == "reset" else ()
    finding: dict[str, Any] = {
        "summary": _summary(event),
        "rule": f"nvsentinel/{event.check or event.agent or 'event'}",
        "action": rung,
        "source": "nvsentinel",
    }
    if xids:
        finding["xid"] = xids[0]
    if gpus:
        finding["gpus"] = list(gpus)
    return Answer(rung, then, gpus, "; ".join(reasons), finding)


def _asked_rung(
    event: HealthEvent, custom_actions: Mapping[str, str | None], reasons: list[str]
) -> str | None:
    if event.action == "CUSTOM":
        rung = custom_actions.get(event.custom)
        said = "null" if rung is None else rung
        reasons.append(f"CUSTOM {event.custom or '(unnamed)'}: {said}")
        return rung
    rung = RUNG_OF_ACTION.get(event.action)
    if rung:
        then = " then manual" if event.action in THEN_MANUAL else ""
        reasons.append(f"{event.action}: {rung}{then}")
    return rung


def _catalog_rung(
    codes: Sequence[str], check: str, catalog: Catalog, reasons: list[str]
) -> tuple[str | None, list[int]]:
    """The strongest fence the errorCodes ask for through the catalog, and the Xids seen."""
    rungs: list[str] = []
    xids: list[int] = []
    # NVSentinel's checks: SysLogsXIDError, SysLogsSXIDError ("...sXID..." is not an SXid)
    sxid_check = "SXID" in check
    xid_check = "XID" in check.upper() and not sxid_check
    for code in codes:
        text = code.strip()
        if text.upper() == FALLEN_OFF_BUS:
            num, table = 79, "xid"
        elif m := _SXID.match(text):
            num, table = int(m.group(1)), "sxid"
        elif sxid_check and _DIGITS.match(text):
            num, table = int(text), "sxid"
        elif (m := _XID.match(text)) and (xid_check or not _DIGITS.match(text)):
            num, table = int(m.group(1)), "xid"
        else:
            reasons.append(f"errorCode {text!r} is not an Xid or SXid fleetmedic knows")
            continue
        if table == "xid":
            entry = catalog.xids.get(num)
            action = entry.action if entry else catalog.unknown_xid_action
            xids.append(num)
        else:
            sx = catalog.sxids.get(num)
            action = sx.action if sx else catalog.unknown_sxid_action
        state = fence_state(action)
        reasons.append(f"{table.upper()} {num}: {action} in the catalog")
        if state:
            rungs.append(state)
    return (max(rungs, key=REPAIR_STATES.index) if rungs else None), xids


def _gpus(entities: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The GPUs a reset is for: their UUIDs if given, else PCI bus ids, else indexes."""
    for kinds in (("GPU_UUID",), ("PCI", "PCIE"), ("GPU",)):
        found = tuple(dict.fromkeys(v for t, v in entities if t.upper() in kinds and v))
        if found:
            return found
    return ()


def _summary(event: HealthEvent) -> str:
    what = event.check or event.agent or "health event"
    codes = f" [{', '.join(event.codes)}]" if event.codes else ""
    text = " ".join(event.message.split())
    return f"NVSentinel {what}{codes}: {text}"[:240] if text else f"NVSentinel {what}{codes}"


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
