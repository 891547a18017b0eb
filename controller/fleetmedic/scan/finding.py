"""The :class:`Finding` record: one GPU fault read from one log line.

A finding is what the scanner yields and what ``fleetmedic scan --json``
prints. Its JSON form has exactly the eight fields of the issue contract
(:data:`JSON_FIELDS`); the extra attributes (timestamp, pid, process, the
catalog rule, the boot id) are for the agent and for the table view.

Actions, from mildest to strongest (:data:`ACTIONS`):

``none``
    Not a node problem (an application fault, an informational event).
``monitor``
    Record it; repeated findings may matter (the agent's strikes decide).
``reset``
    A GPU reset cures it (NVIDIA's ``RESET_GPU`` bucket, Xid 154's "GPU reset"
    value, an amdgpu MES/KIQ hang); until the ladder has a reset rung the agent
    fences it at ``reboot`` (:data:`fleetmedic.model.actions.FENCE_AT`).
``reboot`` / ``reimage`` / ``manual``
    Enter the repair ladder at that step (the taint states of
    :data:`fleetmedic.model.vocabulary.REPAIR_STATES`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fleetmedic.model.actions import ACTION_RANK, ACTIONS

__all__ = ["ACTIONS", "ACTION_RANK", "JSON_FIELDS", "KINDS", "VENDORS", "Finding", "worst"]

VENDORS: tuple[str, ...] = ("nvidia", "amd")
KINDS: tuple[str, ...] = ("xid", "sxid", "nvrm", "amdgpu", "nccl", "cuda", "fabricmanager")

JSON_FIELDS: tuple[str, ...] = (
    "line",
    "vendor",
    "kind",
    "code",
    "pci",
    "action",
    "bucket",
    "message",
)
"""The exact keys of a finding's JSON object, in output order."""


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One classified GPU fault.

    The first eight fields are the JSON contract:

    - ``line``: 1-based line number in its input (for a followed source,
      the count of lines read from it so far).
    - ``vendor``: ``nvidia`` or ``amd``.
    - ``kind``: ``xid``, ``sxid``, ``nvrm`` (an NVIDIA kernel message without
      an Xid number), ``amdgpu``, ``nccl``, ``cuda`` or ``fabricmanager`` (a line of
      NVIDIA Fabric Manager's own log).
    - ``code``: the Xid / SXid number, the InfiniBand completion status for
      ``nccl``, else ``None``.
    - ``pci``: the device as lowercase ``dddd:bb:dd`` (no ``PCI:`` prefix,
      no function), or ``None`` when the line names no device.
    - ``action``: one of :data:`ACTIONS`.
    - ``bucket``: NVIDIA's resolution bucket (e.g. ``RESET_GPU``) or ``None``.
    - ``message``: the fault text (for Xids the driver's text after the code,
      pid and process name; otherwise the kernel message without the log
      prefix).

    The rest is known only sometimes:

    - ``timestamp``: the timestamp exactly as the log wrote it.
    - ``time`` / ``clock``: that timestamp in seconds; ``clock`` says which
      clock (``"uptime"``: seconds since boot, ``"wall"``: Unix time).
    - ``pid`` / ``process``: the process the driver blamed.
    - ``rule``: the catalog entry that matched (e.g. ``xid.79``,
      ``amdgpu.ras-uncorrectable``); stable, usable in alerts.
    - ``boot_id``: the boot this line belongs to, when known.
    - ``dedup_kind`` / ``dedup_code``: the identity used by
      :class:`fleetmedic.scan.dedup.Dedup` (a "fallen off the bus" line
      without an Xid shares Xid 79's identity, so the pair is one finding).
    """

    line: int
    vendor: str
    kind: str
    code: int | None
    pci: str | None
    action: str
    bucket: str | None
    message: str
    timestamp: str | None = None
    time: float | None = None
    clock: str | None = None
    pid: int | None = None
    process: str | None = None
    rule: str = ""
    boot_id: str | None = None
    dedup_kind: str = ""
    dedup_code: str = ""

    def placed(
        self,
        line: int,
        pci: str | None,
        timestamp: str | None,
        time: float | None,
        clock: str | None,
        boot_id: str | None,
    ) -> Finding:
        """This finding at its place in a log: what ``dataclasses.replace`` gives for
        these fields, at half its cost (its generic walk over the fields was a tenth of
        a bulk scan's Python time; the scanner places every finding)."""
        return Finding(
            line,
            self.vendor,
            self.kind,
            self.code,
            pci,
            self.action,
            self.bucket,
            self.message,
            timestamp,
            time,
            clock,
            self.pid,
            self.process,
            self.rule,
            boot_id,
            self.dedup_kind,
            self.dedup_code,
        )

    def to_json(self) -> dict[str, Any]:
        """The issue's JSON object: exactly :data:`JSON_FIELDS`, in order (spelled out: a
        loop of ``getattr`` over them cost three times as much per finding)."""
        return {
            "line": self.line,
            "vendor": self.vendor,
            "kind": self.kind,
            "code": self.code,
            "pci": self.pci,
            "action": self.action,
            "bucket": self.bucket,
            "message": self.message,
        }

    @property
    def rank(self) -> int:
        """Position of :attr:`action` in :data:`ACTIONS` (higher is worse)."""
        return ACTION_RANK[self.action]

    def identity(self) -> tuple[str, str, str]:
        """``(pci, kind, code)`` as dedup sees it (the boot is added by the caller)."""
        kind = self.dedup_kind or self.kind
        code = self.dedup_code or (str(self.code) if self.code is not None else self.rule)
        return (self.pci or "", kind, code)


def worst(findings: list[Finding]) -> Finding | None:
    """The finding with the strongest action (the first one on ties)."""
    best: Finding | None = None
    for finding in findings:
        if best is None or finding.rank > best.rank:
            best = finding
    return best
