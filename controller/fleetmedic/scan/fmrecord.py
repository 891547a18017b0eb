"""A Fabric Manager GPU NVL record's detail lines, read and decoded (issue 39).

On GB200/NVL systems Fabric Manager (on an NVOS switch tray, NMX-C's
``fabricmanager.log``) logs a GPU NVLink error as one head line and a dozen
``key : value`` detail lines, no timestamp of their own::

    [Jul 19 2025 18:34:55] [ERROR] [tid 192] Fabric Manager detected GPU NVL Non Fatal error on :
    moduleId : 1
    nodeId : 6
    gpuGuid : 0xb0cf0e0300e42e00
    portNum : 61
    errorCode : 0x02
    errorSubcode : 0x07
    ...

(phatut/nmx-c-analyzers ``examples/sample_input_logs.txt`` @70f8d9f; a GB200 runbook's
``grep -A 11`` of the same record shows 11 detail lines). The scanner holds the head's
finding while such lines follow (:data:`DETAIL`, at most :data:`MAX_DETAILS`) and
:func:`decorate` puts what they say into the finding: the GPU's GUID, its port, the
compute tray (nodeId, moduleId) and the error decoded to its NVLink5 Xid family.

The decode (:data:`DECODED`) is the one published table we found: phatut/nmx-c-analyzers
maps an (errorCode, errorSubcode) pair, not an errorCode alone, to an "equivalent"
Xid. It is a third party's reading, not NVIDIA's (Fabric Manager's guide 2.3 documents no
errorCode values), so the finding says whose it is. A pair it does not list is said to be
unknown; that parser itself falls back to Xid 149 for every pair it does not know, which
we do not copy (an unknown code is not a NETIR error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from fleetmedic.model.actions import ACTION_RANK
from fleetmedic.scan import regexcache
from fleetmedic.scan.entries import XidEntry
from fleetmedic.scan.finding import Finding

DETAIL = regexcache.compile(r"([A-Za-z][A-Za-z0-9_]*) : (.*)")
"""One detail line's message: ``key : value``. It must hold the literal ``" : "`` (the
bulk pre-filter brings the line after every line holding it: :data:`FOLLOW`)."""

_INLINE = regexcache.compile(r"(.*? on :) ([A-Za-z][A-Za-z0-9_]* : .*)")
_PAIR = regexcache.compile(r"([A-Za-z][A-Za-z0-9_]*) : (.*?)(?= [A-Za-z][A-Za-z0-9_]* : |$)")

FOLLOW = " : "
"""The literal every detail line holds: a detail line asks the bulk pre-filter for the
line after it, so the line and bulk scans see the same record lines."""

MAX_DETAILS = 16
"""A record holds at most this many detail lines; the next one ends it. The published
records have 11 (runbook) and 12 (nmx-c-analyzers) detail lines, errorDebugData last."""

RECORD_WAIT = 1.0
"""Seconds a follower waits on a quiet log before it ends a held record
(:meth:`~fleetmedic.scan.scanner.Scanner.expire`). Fabric Manager writes a record's
lines together, so a record still open after this long has ended."""

_NMXC = "phatut/nmx-c-analyzers nmx_table_analyzer_fast.py map_to_xid_equivalent @2f56167"
_NMXC_BOTH = f"{_NMXC} and nmx_table_analyzer.py @2f56167"


@dataclasses.dataclass(frozen=True, slots=True)
class Decoded:
    """An (errorCode, errorSubcode) pair's Xid as a published decoder reads it."""

    xid: int
    what: str
    source: str


DECODED: Mapping[tuple[int, int], Decoded] = {
    (0x02, 0x07): Decoded(149, "port down event", _NMXC_BOTH),
    (0x02, 0x08): Decoded(145, "recovery event", _NMXC_BOTH),
    (0x01, 0x01): Decoded(144, "training failure", _NMXC_BOTH),
    (0x03, 0x01): Decoded(150, "timeout error", _NMXC_BOTH),
    (0x02, 0x01): Decoded(149, "lane failure", _NMXC),
    (0x01, 0x02): Decoded(144, "link training error", _NMXC),
    # Left out: its (0x04, 0x01) -> Xid 151 "NVLink protocol error"; NVIDIA's Xid catalog
    # has 151 as a key rotation error, not an NVLink5 Xid, so that entry cannot be right.
}


# the GPU and its port first: the annotation keeps a finding's first 160 characters
_WHERE = (("gpuGuid", "gpuGuid"), ("portNum", "port"))
_TRAY = (("nodeId", "node"), ("moduleId", "module"))


def _hex(value: str | None) -> int | None:
    try:
        return int(value, 16) if value else None
    except ValueError:
        return None


def inline(message: str) -> tuple[str, dict[str, str]]:
    """A record that came as one line: the head's text and the details it carries.

    The journal keeps a message logged with newlines as one record, and our journal
    reader gives it as one line (:func:`~fleetmedic.scan.stream.journal_line`):
    ``... GPU NVL Fatal error on : moduleId : 3 nodeId : 7 ...``."""
    said = _INLINE.fullmatch(message)
    if said is None:
        return message, {}
    details: dict[str, str] = {}
    for key, value in _PAIR.findall(said.group(2)):
        details.setdefault(key, value.strip())
    return said.group(1), details


def family(entry: XidEntry) -> str:
    """An NVLink5 Xid's family name from its mnemonic: NVLINK_RLW_ERROR -> RLW."""
    name = entry.mnemonic.removeprefix("NVLINK_").removesuffix("_ERROR")
    return name or entry.mnemonic


def summary(details: Mapping[str, str], xids: Mapping[int, XidEntry]) -> tuple[str, int | None]:
    """The record's details in a few words, and the decoded Xid (None if not decoded)."""
    code_text = details.get("errorCode")
    sub_text = details.get("errorSubcode")
    code, sub = _hex(code_text), _hex(sub_text)
    decoded = DECODED.get((code, sub)) if code is not None and sub is not None else None
    if code_text is None:
        said = "no errorCode"
    elif decoded is None:
        said = f"unknown errorCode {code_text}/{sub_text or '?'}"
    else:
        entry = xids.get(decoded.xid)
        name = family(entry) if entry is not None else "?"
        said = f"errorCode {code_text}/{sub_text} = Xid {decoded.xid} {name} ({decoded.what})"
    parts = [said]
    where = " ".join(f"{label} {details[key]}" for key, label in _WHERE if key in details)
    tray = " ".join(f"{label} {details[key]}" for key, label in _TRAY if key in details)
    parts += [text for text in (where, tray) if text]
    return "; ".join(parts), decoded.xid if decoded is not None else None


def decorate(found: Finding, details: Mapping[str, str], xids: Mapping[int, XidEntry]) -> Finding:
    """The head's finding with its record's details in its message and dedup identity.

    The action stays the head line's: the driver's word (Fatal: ``reset``; Non Fatal:
    ``monitor``) wins. The decoded Xid may only raise it, where its own catalog entry
    says something stronger; NVIDIA's catalog sends 144-150 to WORKFLOW_NVLINK5_ERR,
    which decodes the kernel line's own register bits, which a Fabric Manager record
    does not carry, so those entries say ``monitor`` and the head decides today. A
    third party's decode never lowers what Fabric Manager said.
    """
    if not details:
        return found
    said, xid = summary(details, xids)
    action = found.action
    entry = xids.get(xid) if xid is not None else None
    if entry is not None and ACTION_RANK[entry.action] > ACTION_RANK[action]:
        action = entry.action
    guid = details.get("gpuGuid", "")
    port = details.get("portNum", "")
    return dataclasses.replace(
        found,
        message=f"{found.message} {said}",
        action=action,
        # one GPU's port is one fault: another GPU's record is not its repeat
        dedup_code=f"{found.rule}@{guid}/{port}" if guid else found.dedup_code,
    )
