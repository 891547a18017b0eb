"""The burn-in's collective test: a single-node all-reduce across the node's GPUs, judged
against the hardware profile's ``expected_busbw_gbps`` (issue 30).

NVIDIA's nccl-tests and AMD's rccl-tests build the same ``all_reduce_perf`` with the same
output (nccl-tests README, doc/PERFORMANCE.md): a table of one row per message size with
out-of-place and in-place ``time algbw busbw #wrong``, then ``# Out of bounds values : N
OK`` and ``# Avg bus bandwidth : X`` (the mean over every row, small sizes included).

What is compared: the bus bandwidth at the largest size of the sweep (the better of
out-of-place and in-place), because that is the figure published runs state ("busbw at
large sizes") and that a slow link lowers; the average is kept in the evidence, but with
``-b 8`` it is dominated by the latency of the small sizes, a fifth or less of the large
size's on an NVLink node, and no public source gives it. A row with wrong values fails the
test whatever the speed (the GPUs computed a wrong sum). Pure: parsing and judging only.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from fleetmedic.checks.base import CheckResult, ok, problem, unknown

NAME = "collective.all_reduce"
SWEEP = ("-b", "8", "-e", "1G", "-f", "2")
"""8 B to 1 GiB by doubling: the sizes health checks use, so the large end is reached and
a single run stays around a minute on 8 GPUs."""
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", re.M)
_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.M)


@dataclasses.dataclass(frozen=True)
class Sweep:
    size: int  # bytes, the largest size measured
    busbw: float  # GB/s at that size (the better of out-of-place and in-place)
    average: float | None  # the tool's "Avg bus bandwidth" line
    wrong: int  # values found wrong over all rows (and out of bounds)
    rows: int


def parse(text: str) -> Sweep | None:
    """The sweep in all_reduce_perf's output (None: no table, e.g. the tool failed)."""
    rows: list[tuple[int, float, int]] = []
    for line in text.splitlines():
        cols = line.split()
        if not cols or cols[0].startswith("#") or len(cols) < 13 or not cols[0].isdigit():
            continue
        try:
            size, bw = int(cols[0]), max(float(cols[7]), float(cols[11]))
            wrong = _count(cols[8]) + _count(cols[12])
        except ValueError:
            continue
        rows.append((size, bw, wrong))
    if not rows:
        return None
    size, bw, _ = max(rows)
    avg = _AVG.search(text)
    bounds = _BOUNDS.search(text)
    wrong = sum(r[2] for r in rows) + (int(bounds.group(1)) if bounds else 0)
    return Sweep(size, bw, float(avg.group(1)) if avg else None, wrong, len(rows))


def _count(col: str) -> int:
    return 0 if col in ("N/A", "-") else int(col)


def judge(
    sweep: Sweep | None,
    expected: tuple[float, float] | None,
    *,
    profile: str | None,
    gpus: int,
    failure: str = "",
) -> CheckResult:
    """One result: ``expected`` is (GB/s, tolerance) from the hardware profile."""
    base: dict[str, Any] = {"profile": profile, "gpus": gpus}
    if sweep is None:
        return unknown(NAME, f"all_reduce_perf printed no results: {failure or 'no output'}",
                       **base)  # fmt: skip
    at = _human(sweep.size)
    said = f"all_reduce bus bandwidth {sweep.busbw:.1f} GB/s at {at} on {gpus} GPUs"
    facts: dict[str, Any] = {**base, "busbw_gbps": sweep.busbw, "size": sweep.size,
             "avg_busbw_gbps": sweep.average, "wrong": sweep.wrong}  # fmt: skip
    if sweep.wrong:
        return problem(NAME, f"{said}, {sweep.wrong} wrong values", **facts)
    if expected is None:
        why = (
            f"hardware profile {profile} states no expected_busbw_gbps"
            if profile
            else "no hardware profile matches this node (no expected_busbw_gbps)"
        )
        return unknown(NAME, f"{said}; {why} to compare with", **facts)
    want, tolerance = expected
    floor = want * (1 - tolerance)
    facts |= {"expected_gbps": want, "tolerance": tolerance, "floor_gbps": round(floor, 2)}
    versus = f"expected {want:g} GB/s (at least {floor:.1f}, {tolerance:.0%} below)"
    if sweep.busbw < floor:
        return problem(NAME, f"{said}, {versus}", **facts)
    return ok(NAME, f"{said}, {versus}", **facts)


def _human(size: int) -> str:
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= n and size % n == 0:
            return f"{size // n} {unit}"
    return f"{size} B"
