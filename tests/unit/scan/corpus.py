"""The issue's four detection figures, computed from the development corpus.

Run ``.venv/bin/python tests/unit/scan/corpus.py`` for the table (and the corpus size
by vendor and family); ``test_scan_corpus.py`` holds the figures to their targets.

Each line of ``tests/data/corpus/lines.yaml`` is scanned alone, as
``fleetmedic scan --json --no-dedup`` would on a one-line file:

1. *Xid/SXid code and PCI id correct*: over Xid and SXid lines, one finding whose
   code and PCI id are the expected ones.
2. *action agrees with NVIDIA's catalog bucket*: over NVIDIA fault lines that carry a
   bucket, the finding's action is one :data:`AGREES` allows for that bucket (a
   reboot cures what a GPU reset cures, so ``RESET_GPU`` allows both).
3. *benign lines flagged*: benign lines (``expect: null``) that gave any finding.
4. *AMD hardware errors recognised*: AMD fault lines that gave a finding with an
   action other than ``none``.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from functools import cache
from pathlib import Path

import yaml

from fleetmedic.scan import Finding, Scanner
from fleetmedic.scan.scanner import is_fabric_log

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"

AGREES: dict[str, frozenset[str]] = {
    "RESET_GPU": frozenset({"reset", "reboot"}),
    "RESTART_BM": frozenset({"reboot"}),
    "RESTART_VM": frozenset({"reboot"}),
    "RESTART_APP": frozenset({"monitor"}),
    "IGNORE": frozenset({"none", "monitor"}),
    "WORKFLOW_XID_45": frozenset({"none"}),
    "WORKFLOW_XID_48": frozenset({"reset", "reboot"}),
    "WORKFLOW_NVLINK_ERR": frozenset({"reset", "reboot"}),
    "CHECK_MECHANICALS": frozenset({"manual"}),
    "UPDATE_SWFW": frozenset({"reimage"}),
}
"""NVIDIA resolution bucket -> the actions that carry it out."""

TARGETS = {"code_pci": 1.0, "bucket": 0.97, "benign": 0, "amd": 0.90}


@cache
def lines() -> tuple[dict, ...]:
    return tuple(yaml.safe_load((CORPUS / "lines.yaml").read_text(encoding="utf-8")))


@cache
def reports() -> tuple[dict, ...]:
    return tuple(yaml.safe_load((CORPUS / "reports.yaml").read_text(encoding="utf-8")))


def scan_line(line: str) -> list[Finding]:
    """As ``fleetmedic scan --no-dedup`` on a one-line file (a held line comes out at the end)."""
    return list(Scanner(dedup=False, fabric=is_fabric_log(line)).scan([line]))


def scan_report(report: dict) -> list[Finding]:
    fabric = is_fabric_log("\n".join(report["lines"]))
    return list(Scanner(dedup=False, fabric=fabric).scan(report["lines"]))


@dataclasses.dataclass
class Figure:
    hits: int = 0
    total: int = 0
    misses: list[str] = dataclasses.field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.hits / self.total if self.total else 1.0

    def count(self, ok: bool, line: str) -> None:
        self.total += 1
        self.hits += ok
        if not ok:
            self.misses.append(line)


def figures() -> dict[str, Figure]:
    out = {name: Figure() for name in ("code_pci", "bucket", "benign", "amd", "reports")}
    for case in lines():
        found = scan_line(case["line"])
        expect = case["expect"]
        if expect is None:
            out["benign"].count(bool(found), case["line"])  # hits = flagged
            continue
        first = found[0] if found else None
        if case["family"] in ("xid", "sxid"):
            ok = (
                len(found) == 1
                and first is not None
                and (first.code, first.pci) == (expect["code"], expect["pci"])
            )
            out["code_pci"].count(ok, case["line"])
        if case["vendor"] == "nvidia" and case.get("bucket"):
            ok = first is not None and first.action in AGREES[case["bucket"]]
            out["bucket"].count(ok, f"{case['line']} -> {first.action if first else None}")
        if case["vendor"] == "amd":
            out["amd"].count(first is not None and first.action != "none", case["line"])
    for report in reports():
        got = [(f.line, f.pci, f.action) for f in scan_report(report)]
        want = [(f["line"], f["pci"], f["action"]) for f in report["findings"]]
        out["reports"].count(got == want, f"{report['name']}: {got}")
    return out


def sizes() -> dict[tuple[str, str], int]:
    return dict(sorted(collections.Counter((c["vendor"], c["family"]) for c in lines()).items()))


def main() -> int:
    figs = figures()
    print(f"corpus: {len(lines())} lines, {len(reports())} multi-line reports")
    for (vendor, family), count in sizes().items():
        print(f"  {vendor:7s} {family:22s} {count:4d}")
    f = figs
    rows = [
        ("Xid/SXid code and PCI id correct", f"{f['code_pci'].ratio:.1%}", "100 %"),
        ("action agrees with NVIDIA's catalog bucket", f"{f['bucket'].ratio:.1%}", ">= 97 %"),
        ("benign lines flagged", f"{f['benign'].hits} of {f['benign'].total}", "0"),
        ("AMD hardware errors recognised", f"{f['amd'].ratio:.1%}", ">= 90 %"),
        (
            "multi-line reports giving one finding",
            f"{f['reports'].hits} of {f['reports'].total}",
            "all",
        ),
    ]
    print(f"\n{'figure':45s} {'now':>10s}  target")
    for name, now, target in rows:
        print(f"{name:45s} {now:>10s}  {target}")
    verbose = "-v" in sys.argv
    for name, fig in figs.items():
        wrong = fig.misses if name != "benign" else []
        if name == "benign":
            wrong = [
                line
                for line in (c["line"] for c in lines() if c["expect"] is None)
                if scan_line(line)
            ]
        if wrong and verbose:
            print(f"\n{name}: {len(wrong)} wrong")
            for line in wrong:
                print(f"  {line[:160]}")
    ok = (
        f["code_pci"].ratio >= TARGETS["code_pci"]
        and f["bucket"].ratio >= TARGETS["bucket"]
        and f["benign"].hits <= TARGETS["benign"]
        and f["amd"].ratio >= TARGETS["amd"]
        and f["reports"].hits == f["reports"].total
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
