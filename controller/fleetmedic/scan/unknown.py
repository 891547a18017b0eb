"""``fleetmedic scan --unknown``: the driver lines no catalog rule knows, grouped by shape.

The safety net (:mod:`fleetmedic.scan.net`) turns such lines into
``<driver>.unclassified`` findings. Here they are grouped by their shape (the
line with numbers, hex values, PCI ids and process names folded), counted, and
listed most frequent first, with the first example of each, so that an operator
sees in one screen what the catalog lacks and can send it upstream.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import TextIO

from fleetmedic.scan.finding import Finding
from fleetmedic.scan.net import shape

SUFFIX = ".unclassified"


@dataclasses.dataclass(slots=True)
class Group:
    """One shape: how often it came, on which GPUs, and its first line."""

    rule: str
    shape: str
    count: int
    source: str
    line: int
    example: str
    pcis: set[str] = dataclasses.field(default_factory=set)


class Groups:
    """Unclassified findings folded by ``(rule, shape)``, in order of first sight."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], Group] = {}

    def add(self, source: str, finding: Finding) -> None:
        if not finding.rule.endswith(SUFFIX):
            return
        key = (finding.rule, shape(finding.message))
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(
                finding.rule, key[1], 0, source, finding.line, finding.message
            )
        group.count += 1
        if finding.pci:
            group.pcis.add(finding.pci)

    def add_all(self, source: str, findings: Iterable[Finding]) -> None:
        for finding in findings:
            self.add(source, finding)

    def ranked(self) -> list[Group]:
        """Most frequent first; ties in order of first sight."""
        return sorted(self._groups.values(), key=lambda g: -g.count)


def write_table(groups: Groups, out: TextIO, multi: bool = False) -> None:
    """COUNT, DRIVER RULE, GPUS, first LINE, SHAPE; a one-line note when there is none."""
    ranked = groups.ranked()
    if not ranked:
        out.write("No unknown driver errors found.\n")
        return
    rows = [("COUNT", "RULE", "GPUS", "FIRST", "SHAPE")]
    for g in ranked:
        first = f"{g.source}:{g.line}" if multi else str(g.line)
        rows.append((str(g.count), g.rule, str(len(g.pcis) or "-"), first, g.shape))
    sizes = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        head = "  ".join(
            cell.rjust(sizes[i]) if i in (0, 2, 3) else cell.ljust(sizes[i])
            for i, cell in enumerate(row[:4])
        )
        out.write(f"{head}  {row[4]}\n")


def write_json(groups: Groups, out: TextIO) -> None:
    """One JSON object per shape: count, rule, shape, pcis, source, line, example."""
    for g in groups.ranked():
        obj = {
            "count": g.count,
            "rule": g.rule,
            "shape": g.shape,
            "pcis": sorted(g.pcis),
            "source": g.source,
            "line": g.line,
            "example": g.example,
        }
        out.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")
