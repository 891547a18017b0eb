"""Output for ``fleetmedic scan``: JSON Lines or a table for people.

The table is meant to be read at 3 a.m.: the action comes first, findings
keep their input order, the message is cut to the terminal width, and a
summary line names the worst finding and what to do about it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TextIO

from fleetmedic.scan.finding import ACTIONS, Finding, worst

COLUMNS = ("LINE", "ACTION", "KIND", "CODE", "PCI", "BUCKET", "MESSAGE")

_WHAT_NEXT = {
    "none": "nothing to do",
    "monitor": "watch for repeats",
    "diagnose": "GPU needs diagnostics (DCGM / rvs)",
    "reset": "GPU needs a reset",
    "reboot": "node needs a reboot",
    "reimage": "node needs a driver/ROCm reinstall",
    "manual": "node needs a human (hardware)",
}


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
"""What ``json.dumps`` with these options uses, built once (``json.dumps`` builds an
encoder at every call that asks for options: a quarter of its time per finding)."""


def json_line(finding: Finding) -> str:
    """One JSON object with exactly the contract's fields, compact, keys in order."""
    return _COMPACT.encode(finding.to_json())


def write_json(findings: Iterable[Finding], out: TextIO) -> int:
    """Write JSON Lines; returns the number written."""
    count = 0
    for finding in findings:
        out.write(json_line(finding) + "\n")
        count += 1
    return count


def _cells(finding: Finding, source: str | None) -> list[str]:
    line = f"{source}:{finding.line}" if source else str(finding.line)
    kind = f"{finding.vendor}/{finding.kind}"
    return [
        line,
        finding.action.upper() if finding.rank >= 2 else finding.action,
        kind,
        "" if finding.code is None else str(finding.code),
        finding.pci or "-",
        finding.bucket or "-",
        " ".join(finding.message.split()),
    ]


def write_table(
    rows: list[tuple[str | None, Finding]], out: TextIO, width: int | None = None
) -> None:
    """Write ``(source, finding)`` rows as an aligned table; ``source`` shown if not ``None``.

    ``width`` (the terminal's) cuts the message column; ``None`` leaves it whole.
    """
    if not rows:
        return
    table = [list(COLUMNS)] + [_cells(finding, source) for source, finding in rows]
    sizes = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
    for row in table:
        head = "  ".join(
            cell.rjust(sizes[i]) if i in (0, 3) else cell.ljust(sizes[i])
            for i, cell in enumerate(row[:-1])
        )
        message = row[-1]
        if width is not None:
            room = max(width - len(head) - 2, 20)
            if len(message) > room:
                message = message[: room - 1] + "…"
        out.write(f"{head}  {message}".rstrip() + "\n")


def summary(findings: list[Finding], lines: int, inputs: int) -> str:
    """One line: counts per action and the worst finding, e.g. for stderr or below the table."""
    scope = f"{lines} line{'s' if lines != 1 else ''}" + (
        f" in {inputs} inputs" if inputs > 1 else ""
    )
    if not findings:
        return f"No GPU faults found ({scope})."
    counts = {action: 0 for action in ACTIONS}
    for finding in findings:
        counts[finding.action] += 1
    parts = ", ".join(f"{counts[a]} {a}" for a in reversed(ACTIONS) if counts[a])
    top = worst(findings)
    assert top is not None
    label = f"{top.kind} {top.code}" if top.code is not None else top.rule
    where = f" on {top.pci}" if top.pci else ""
    return (
        f"{len(findings)} finding{'s' if len(findings) != 1 else ''} ({parts}) in {scope}. "
        f"Worst: {top.action} - {label}{where}, line {top.line}: {_WHAT_NEXT[top.action]}."
    )
