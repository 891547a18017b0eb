"""Deadlines that stretch with the machine's load, for the waits a test cannot make
event-driven (a reboot, a controller's phase, a server's start).

A test's deadline says "this has surely happened by now", not how fast it happens (speed
lives in bench/, measured against a baseline of the same run). A fixed deadline picked on
an idle machine fails on a loaded one: the suite's own workers, the bench and Molecule
lanes beside them and, on a shared desk, other people's work all take CPU from the node or
controller being waited for. So a deadline here is the idle-machine figure times
:func:`factor`, the 1-minute load average per CPU (at least 1, at most ``MAX_FACTOR``),
read again at every poll: a wait that began on a quiet machine still stretches when the
load comes, and one whose load goes keeps what it was given so far.

    deadline = Deadline(60)            # 60 s on an idle machine
    while not deadline.passed():
        ...
    scaled(25)                         # a figure for a config (a playbook's timeout)

``FLEETMEDIC_TEST_LOAD_FACTOR`` fixes the factor (1: the idle-machine deadlines as
written, to see how a test fares without it).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

MAX_FACTOR = 4.0  # a wait never stretches past 4 times its idle figure
ENV = "FLEETMEDIC_TEST_LOAD_FACTOR"


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load_per_cpu(loadavg: str = "/proc/loadavg") -> float:
    try:
        return float(Path(loadavg).read_text().split()[0]) / cpus()
    except (OSError, ValueError, IndexError):
        return 1.0


def factor(loadavg: str = "/proc/loadavg") -> float:
    """How many times its idle figure a deadline gets now: the load average per CPU,
    between 1 and MAX_FACTOR (or FLEETMEDIC_TEST_LOAD_FACTOR)."""
    fixed = os.environ.get(ENV, "")
    if fixed:
        try:
            return max(1.0, float(fixed))
        except ValueError:
            raise ValueError(f"{ENV}={fixed!r}: a number, 1 or more") from None
    return min(MAX_FACTOR, max(1.0, load_per_cpu(loadavg)))


def scaled(seconds: float) -> int:
    """``seconds`` (an idle-machine figure) stretched by the load now, whole seconds up."""
    return math.ceil(seconds * factor())


NICED = 10  # a process at this niceness or more runs in a low-priority lane
NICED_SHARE = 10.0  # ... and gets at most a tenth of what the load factor allows for


def guard(seconds: float) -> int:
    """A hang guard for a child process whose result the test then checks (not a deadline
    for an event): ``seconds`` stretched by the load, and :data:`NICED_SHARE` times more
    in a low-priority lane (scripts/test.sh runs the unit tests at nice 19 beside the
    integration tests: their children get a sliver of a CPU, which the load average does
    not show; a 60 s guard on a 2 s ``python -m fleetmedic`` ran out at load 11)."""
    niced = os.nice(0) >= NICED
    return math.ceil(seconds * factor() * (NICED_SHARE if niced else 1.0))


class Deadline:
    """``seconds`` from now on an idle machine, stretched by the load at every look."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.peak = factor()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def allowed(self) -> float:
        """The idle figure times the highest factor seen since the start."""
        self.peak = max(self.peak, factor())
        return self.seconds * self.peak

    def passed(self) -> bool:
        return self.elapsed() > self.allowed()

    def remaining(self) -> float:
        return max(0.0, self.allowed() - self.elapsed())

    def __str__(self) -> str:
        return f"{self.elapsed():.0f}s (allowed {self.seconds:g}s x load {self.peak:.1f})"
