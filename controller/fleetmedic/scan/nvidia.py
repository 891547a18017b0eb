"""Decode NVIDIA Xid and NVSwitch SXid lines (no classification here).

The driver prints an Xid as (open-gpu-kernel-modules, kernel_rc.c)::

    NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s

Older drivers omit ``pid``/``name`` or the ``PCI:`` prefix (the legacy
``Xid (0000:03:00): 14, Channel 00000001``); ``pid`` may be ``'<unknown>'``
and ``name`` (the task's ``comm``, at most 15 characters) may hold spaces,
quotes and parentheses. NVSwitch SXids look like::

    nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt
    nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, Severity 1 Engine instance 00 ...

The NVSwitch driver writes the severity itself (src/common/nvswitch/kernel/inc/
intr_nvswitch.h: ``Fatal,``, ``Non-fatal,`` or ``Correctable,`` after the code; the
``Severity N Engine ...`` line of the same event carries NVSWITCH_ERROR_SEVERITY_TYPE,
0 non-fatal, 1 fatal: interface/ctrl_dev_nvswitch.h), and an Xid 94/95 line says whether
the GPU needs a reset (``RST: Yes``) or a drain and reset (``D-RST: Yes``). These words
are :func:`driver_words`: the classifier never acts below them.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from fleetmedic.scan import pci as pcimod
from fleetmedic.scan import regexcache

_XID = regexcache.compile(
    r"\bXid \((?P<dev>[^)]{0,64})\):?\s*(?P<code>\d{1,6})\b,?\s?(?P<rest>.*)", re.S
)
_SXID = regexcache.compile(
    r"\bSXid \((?P<dev>[^)]{0,64})\):?\s*(?P<code>\d{1,6})\b,?\s?(?P<rest>.*)", re.S
)
_PID = regexcache.compile(r"pid=(?P<pid>'?<unknown>'?|\d+|\S*?)(?:,\s?|$)")
_COMM_MAX = 15
_HEX = regexcache.compile(r"0x[0-9a-fA-F]+")
_TO_HEX = regexcache.compile(r"\bto\s+(0x[0-9a-fA-F]+)")
_TO = regexcache.compile(r"\bto\b")
_ENGINE_SEVERITY = regexcache.compile(r"^Severity (\d+) Engine instance")
_SXID_WORDS = {"fatal": "fatal", "non-fatal": "non-fatal", "nonfatal": "non-fatal"}
_SXID_WORDS["correctable"] = "correctable"
_ENGINE_WORDS = {"0": "non-fatal", "1": "fatal"}  # NVSWITCH_ERROR_SEVERITY_TYPE
_RESET_WORDS = regexcache.compile(r"\b(D-RST|RST): Yes\b")
_NVL5 = regexcache.compile(
    r"(?P<unit>[A-Za-z][\w/]*)(?:\s+(?P<sev>Fatal|Nonfatal|Non-fatal)\b)?.*?\((?P<regs>[^)]*)\)",
    re.S,
)


class XidLine(NamedTuple):
    """The parts of one Xid line. ``text`` is what follows code, pid and name. (This and
    :class:`SxidLine` are named tuples: a dataclass costs ``fleetmedic scan``'s start-up
    more.)"""

    code: int
    pci: str | None
    pid: int | None
    process: str | None
    text: str
    mig: str | None


class SxidLine(NamedTuple):
    """The parts of one SXid line. ``severity`` is the printed word, lowercased."""

    code: int
    pci: str | None
    severity: str | None
    text: str


def parse_xid(message: str) -> XidLine | None:
    """Decode ``NVRM: Xid (...)`` or ``None`` if ``message`` is not an Xid line."""
    if "NVRM" not in message:
        return None
    match = _XID.search(message)
    if match is None:
        return None
    dev = match.group("dev").strip()
    head, _, mig = dev.partition(" ")
    pid, process, text = _pid_and_name(match.group("rest"))
    return XidLine(
        int(match.group("code")),
        pcimod.normalize(head),
        pid,
        process,
        text.strip(),
        mig.strip() or None,
    )


def _pid_and_name(rest: str) -> tuple[int | None, str | None, str]:
    if not rest.startswith("pid="):
        return None, None, rest
    match = _PID.match(rest)
    if match is None:
        return None, None, rest
    raw = match.group("pid")
    pid = int(raw) if raw.isdigit() else None
    rest = rest[match.end() :]
    if not rest.startswith("name="):
        return pid, None, rest
    rest = rest[len("name=") :]
    if rest.startswith("<unknown>"):
        return pid, None, rest[len("<unknown>") :].lstrip(", ")
    # The name is the task comm (<= 15 chars) and may itself contain ", ";
    # the driver writes ", " after it. Of the separators within reach, take
    # the first one followed by what starts a driver message (a capital or a
    # digit: "Ch 0008", "Graphics ...", "GPU has ..."), else the first one.
    cuts = []
    cut = rest.find(", ", 0, _COMM_MAX + 2)
    while cut != -1:
        cuts.append(cut)
        cut = rest.find(", ", cut + 1, _COMM_MAX + 2)
    if not cuts:
        if len(rest) <= _COMM_MAX:
            return pid, rest or None, ""
        cut = rest.find(", ")
        if cut == -1:
            return pid, rest[:_COMM_MAX], rest[_COMM_MAX:]
        return pid, rest[:cut] or None, rest[cut + 2 :]
    cut = next(
        (i for i in cuts if rest[i + 2 : i + 3].isupper() or rest[i + 2 : i + 3].isdigit()), cuts[0]
    )
    return pid, rest[:cut] or None, rest[cut + 2 :]


def parse_sxid(message: str) -> SxidLine | None:
    """Decode ``SXid (...)`` or ``None`` if ``message`` is not an SXid line."""
    if "SXid" not in message:
        return None
    match = _SXID.search(message)
    if match is None:
        return None
    rest = match.group("rest")
    word = rest.split(",", 1)[0].strip().lower()
    severity = _SXID_WORDS.get(word)
    if severity is None:
        engine = _ENGINE_SEVERITY.match(rest)
        severity = _ENGINE_WORDS.get(engine.group(1)) if engine else None
    return SxidLine(
        int(match.group("code")), pcimod.normalize(match.group("dev")), severity, rest.strip()
    )


def recovery_action(text: str) -> int | None:
    """Xid 154's new recovery action: the hex value after ``to``, never the words.

    ``"GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"``
    gives ``2``. A line that says ``to`` without a value after it, or ``from`` without
    ``to``, was cut (a log wrapped by hand): ``None``, never the *old* value. A line
    without ``from``/``to`` (an older wording) gives its last hex value.
    """
    match = _TO_HEX.search(text)
    if match is not None:
        return int(match.group(1), 16)
    if _TO.search(text) or "from" in text:
        return None
    values = _HEX.findall(text)
    return int(values[-1], 16) if values else None


def reset_words(text: str) -> str | None:
    """``"D-RST"`` or ``"RST"`` when an Xid 94/95 line says the GPU needs a (drain and)
    reset (``RST: Yes`` / ``D-RST: Yes``), else ``None``."""
    found = _RESET_WORDS.findall(text)
    if not found:
        return None
    return "D-RST" if "D-RST" in found else "RST"


def nvlink5_fields(text: str) -> tuple[str | None, str | None, list[int]]:
    """``(unit, severity, registers)`` of an Xid 144-150 line's text.

    ``"SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 ...)"`` gives
    ``("SAW_MVB", "nonfatal", [1, 8, ...])``; registers are intrInfo,
    errorStatus, then the debug words.
    """
    match = _NVL5.match(text.strip())
    if match is None:
        return None, None, []
    severity = (match.group("sev") or "").lower().replace("-", "") or None
    regs = [int(value, 16) for value in _HEX.findall(match.group("regs"))]
    return match.group("unit").upper(), severity, regs
