"""The fault catalog's entries as frozen records (what :func:`fleetmedic.scan.catalog.load`
builds from the YAML files), and the count thresholds' own small parser (the agent's
config uses it too)."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Mapping
from typing import Any

from fleetmedic.errors import ConfigError
from fleetmedic.model.actions import FENCING_ACTIONS
from fleetmedic.scan import families as fammod


@dataclasses.dataclass(frozen=True, slots=True)
class XidEntry:
    """One row of NVIDIA's Xid catalog plus our ``action`` (and ``why`` if it deviates)."""

    code: int
    mnemonic: str
    description: str
    immediate: str | None
    investigatory: str | None
    action: str
    why: str | None
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class SxidEntry:
    """One NVSwitch SXid: its name, the Fabric Manager guide's severity, our action."""

    code: int
    name: str
    severity: str
    action: str
    why: str | None
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """A message rule (kinds ``nvrm``, ``amdgpu``, ``nccl``, ``cuda``).

    ``requires`` is a literal substring that must be in the message before
    the regex runs (it is also a pre-filter trigger for bulk scanning).
    """

    id: str
    vendor: str
    kind: str
    requires: str
    match: re.Pattern[str] | fammod.FamilyPattern
    unless: re.Pattern[str] | None
    action: str
    bucket: str | None
    code: int | None
    same_as: tuple[str, str] | None
    description: str
    sources: tuple[str, ...]
    continued_by: re.Pattern[str] | None = None
    awaits_process: bool = False
    """The report names its process on a follow-up line (newer amdgpu page faults): the
    scanner holds the finding for that line (context workflows judge by process)."""
    record_details: bool = False
    """The head of a multi-line record whose ``key : value`` detail lines follow (a
    Fabric Manager GPU NVL record): the scanner holds the finding for them
    (:mod:`fleetmedic.scan.fmrecord`)."""
    by_status: Mapping[int, str] = dataclasses.field(default_factory=dict)
    """The driver's status code on the line (``status=0x..``) -> action; a status not
    listed gives ``status_default`` (a line without a status keeps ``action``)."""
    status_default: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Join:
    """A record the log cut in two (``joins`` in the catalog): a line matching ``head``
    (the driver stopped mid-message, or an author wrapped it) is joined with the next
    line when that one continues it (:meth:`continues`) and carries no driver literal of
    its own."""

    id: str
    requires: str  # a literal every head contains (the head regex runs only then)
    head: re.Pattern[str]
    tail: re.Pattern[str]
    literals: tuple[str, ...]  # one of them is in every second half (``tail`` runs then)
    sources: tuple[str, ...]

    def continues(self, message: str) -> bool:
        """Is ``message`` this record's second half? It must hold one of ``literals``
        too: that is what a source filtered line by line (Loki) asks for, so every
        source joins the same records."""
        return any(lit in message for lit in self.literals) and bool(self.tail.search(message))


@dataclasses.dataclass(frozen=True, slots=True)
class NetRule:
    """The safety net for one driver (``unclassified`` in the catalog): a line that
    contains ``requires``, that no rule matched and that is not a known-benign shape
    becomes an ``id`` finding (action ``action``) when it was logged at kernel level
    ``err`` or worse (only if ``level_counts``) or when it says a failure word."""

    id: str
    vendor: str
    kind: str
    requires: str
    level_counts: bool
    action: str
    description: str
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Benign:
    """A known-benign line shape of a GPU driver: the net stays silent on it."""

    match: re.Pattern[str]
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Threshold:
    """When findings that only monitor add up: ``count`` lines of one rule on one GPU
    within ``window`` seconds fence at ``action``. Lines closer than ``burst`` seconds
    to the last counted one are the same event. ``count`` 0 turns it off."""

    count: int
    window: float
    action: str
    burst: float = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Nvlink5Row:
    """``(xid, unit)`` of an Xid 144-150 line -> bucket per error status."""

    status: Mapping[int, str]
    default: str | None
    promotable: frozenset[int]


def threshold_for(table: Mapping[str, Threshold], rule: str) -> Threshold | None:
    """``table[rule]``, else the first fnmatch pattern key that matches ``rule``."""
    found = table.get(rule)
    if found is not None:
        return found
    for key, value in table.items():
        if fnmatch.fnmatchcase(rule, key):
            return value
    return None


def parse_threshold(where: str, key: str, raw: Any) -> Threshold:
    """One threshold from ``{count, window, action, burst}``; ConfigError (one line) if bad."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where}: threshold {key!r} must be a mapping with count, window, action"
        )
    unknown = set(raw) - {"count", "window", "action", "burst"}
    if unknown:
        raise ConfigError(f"{where}: threshold {key!r} has unknown key {sorted(unknown)[0]!r}")
    try:
        count = int(raw.get("count", 0))
        window = float(raw.get("window", 3600))
        burst = float(raw.get("burst", 10.0))
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}: threshold {key!r} needs numbers for count/window/burst"
        ) from None
    action = raw.get("action", "reboot")
    if action not in FENCING_ACTIONS:
        raise ConfigError(
            f"{where}: threshold {key!r} action {action!r} "
            f"must be one of {', '.join(FENCING_ACTIONS)}"
        )
    if count < 0 or window <= 0 or burst < 0:
        raise ConfigError(f"{where}: threshold {key!r} needs count >= 0, window > 0, burst >= 0")
    return Threshold(count, window, str(action), burst)
