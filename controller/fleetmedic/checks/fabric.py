"""RDMA fabric ports (InfiniBand, RoCE, EFA) read from sysfs (issue 20 part 2).

The kernel exposes every RDMA port under ``<root>/class/infiniband/<dev>/ports/<n>/``
(``root`` is ``/sys`` on a node; tests point it at a captured tree):

- ``state``: ``"4: ACTIVE"`` (IB port state number and name);
- ``phys_state``: ``"5: LinkUp"``;
- ``rate``: ``"100 Gb/sec (4X EDR)"``;
- ``link_layer``: ``InfiniBand`` or ``Ethernet`` (RoCE); EFA has ``Unspecified``;
- ``counters/<name>``: one integer each (``symbol_error``, ``link_downed``, ...);
- ``hw_counters/<name>``: driver counters (EFA's ``rx_drops``, ``tx_pkts``, ...).

Verdicts (``fabric.ports``): a port that is not ACTIVE/LinkUp is a problem (the agent
counts strikes); so is a port that was there at the last reading and is gone now (a
device that fell off the bus); an error counter that grew by more than its threshold
since the last reading is a problem (``link_downed`` growing is a flapping port). A
rate below the expected one is a finding of its own (``fabric.rate``), with the
difference as evidence. Thresholds are data (:data:`DEFAULT_THRESHOLDS`, overridable
in the checks' ``fabric:`` config).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fleetmedic.checks.base import CheckResult, not_applicable, ok, problem

# counter -> largest growth between two readings that is still healthy
DEFAULT_THRESHOLDS: Mapping[str, int] = {
    "link_downed": 0,  # any growth: the port went down (flapping when it keeps growing)
    "link_error_recovery": 0,
    "symbol_error": 100,
    "port_rcv_errors": 100,
    "excessive_buffer_overrun_errors": 0,
}
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


@dataclasses.dataclass(frozen=True)
class Port:
    device: str  # mlx5_0, rdmap0s31
    port: str  # "1"
    state: str  # ACTIVE, DOWN, INIT, ARMED, ... ("" when the file is missing)
    phys_state: str  # LinkUp, Disabled, Polling, ...
    rate_gbps: float | None
    link_layer: str
    counters: Mapping[str, int]
    hw_counters: Mapping[str, int]

    @property
    def key(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _name(value: str) -> str:
    """'4: ACTIVE' -> 'ACTIVE' (older kernels write the name alone)."""
    return value.partition(":")[2].strip() if ":" in value else value


def parse_rate(value: str) -> float | None:
    """'100 Gb/sec (4X EDR)' -> 100.0; None when unreadable."""
    m = _RATE.match(value)
    return float(m.group(1)) if m else None


def _counters(folder: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    if not folder.is_dir():
        return out
    for f in sorted(folder.iterdir()):
        text = _read(f)
        if text.isdigit():
            out[f.name] = int(text)
    return out


def read_ports(root: str | Path = "/sys") -> list[Port]:
    """Every RDMA port under ``root``; [] when the kernel has no RDMA class."""
    base = Path(root) / "class" / "infiniband"
    ports: list[Port] = []
    if not base.is_dir():
        return ports
    for dev in sorted(base.iterdir()):
        pdir = dev / "ports"
        if not pdir.is_dir():
            continue
        for p in sorted(pdir.iterdir(), key=lambda x: (len(x.name), x.name)):
            ports.append(
                Port(
                    device=dev.name,
                    port=p.name,
                    state=_name(_read(p / "state")),
                    phys_state=_name(_read(p / "phys_state")),
                    rate_gbps=parse_rate(_read(p / "rate")),
                    link_layer=_read(p / "link_layer"),
                    counters=_counters(p / "counters"),
                    hw_counters=_counters(p / "hw_counters"),
                )
            )
    return ports


def without(ports: list[Port], patterns: Iterable[str]) -> list[Port]:
    """``ports`` less those matching an fnmatch pattern of ``dev/port`` or ``dev``."""
    pats = list(patterns)
    return [
        p
        for p in ports
        if not any(fnmatch.fnmatchcase(p.key, x) or fnmatch.fnmatchcase(p.device, x) for x in pats)
    ]


def counter_snapshot(ports: list[Port]) -> dict[str, dict[str, int]]:
    """What the agent keeps between rounds to compute deltas (JSON-safe)."""
    return {p.key: {**p.counters, **p.hw_counters} for p in ports}


def check_ports(
    ports: list[Port],
    previous: Mapping[str, Mapping[str, int]] | None = None,
    thresholds: Mapping[str, int] = DEFAULT_THRESHOLDS,
) -> CheckResult:
    """``fabric.ports``: down ports and counters that grew past their threshold."""
    name = "fabric.ports"
    now_keys = {p.key for p in ports}
    gone = sorted(k for k in previous or {} if k not in now_keys)
    if not ports and not gone:
        return not_applicable(name, "no RDMA ports", "network")
    down = [f"{p.key} {p.state or '?'}/{p.phys_state or '?'}" for p in ports if not p.up]
    down += [f"{key} gone" for key in gone]
    grew: list[str] = []
    for p in ports:
        before = (previous or {}).get(p.key)
        if before is None:
            continue
        now = {**p.counters, **p.hw_counters}
        for counter, limit in thresholds.items():
            if counter in now and counter in before:
                delta = now[counter] - before[counter]
                if delta > limit:
                    grew.append(f"{p.key} {counter} +{delta} (limit {limit})")
    evidence: dict[str, Any] = {"ports": len(ports), "down": down, "counters": grew}
    if down or grew:
        return problem(name, "; ".join(down + grew), "network", **evidence)
    return ok(name, f"{len(ports)} RDMA ports up", "network", **evidence)


def check_rate(ports: list[Port], expected_gbps: float | None) -> CheckResult:
    """``fabric.rate``: a port slower than expected ('mlx5_3 at 200 Gb/s, expected 400')."""
    name = "fabric.rate"
    if not ports or not expected_gbps:
        return not_applicable(name, "no expected RDMA rate", "network")
    slow = [
        f"{p.key} at {_fmt(p.rate_gbps)} Gb/s, expected {_fmt(expected_gbps)}"
        for p in ports
        if p.up and (p.rate_gbps is None or p.rate_gbps < expected_gbps)
    ]
    if slow:
        return problem(name, "; ".join(slow), "network", degraded=slow)
    return ok(name, f"all RDMA ports at {_fmt(expected_gbps)} Gb/s", "network", degraded=[])


def _fmt(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if value == int(value) else str(value)
