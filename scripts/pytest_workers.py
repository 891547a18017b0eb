#!/usr/bin/env python3
"""How many pytest-xdist workers the suite runs with (scripts/test.sh): sized by the
machine, not a fixed number.

    pytest_workers.py [--lane integration|unit|subset]    print the count (1: serial)

- CPU: one worker per CPU. The suite mostly waits (reboots, API servers, timeouts), but
  its waits have deadlines: with one worker more than the CPUs (3 on 2) a full run had
  three tests fail on load alone (a node not booted in 30 s, a power-cycled node not back
  in time), so the workers stop at the CPU count;
- memory: each worker brings up its own API server, fleets and, for its group, Loki,
  the kubelet node or the Receptor mesh: PER_WORKER_GIB of MemAvailable each;
- ``FLEETMEDIC_PYTEST_WORKERS=N`` sets it (1: serial, the quick way back if a parallel
  run shows a problem). It changes only how the suite runs, not what: under CI=true the
  whole suite still runs and scripts/check_pytest_run.py still compares the count.

A bad value is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys

# Measured 2026-11-26 (MemAvailable sampled every 2 s, 2 CPUs shared with other work): two
# workers running the kubelet group and the Receptor group at once took 1.4 GiB at peak;
# two running test_sweeps_e2e and the agent files 1.1 GiB. 2 GiB a worker leaves room for
# a file with more fleets or controllers up at once.
PER_WORKER_GIB = 2.0
ENV = "FLEETMEDIC_PYTEST_WORKERS"


def mem_available_gib(meminfo: str = "/proc/meminfo") -> float:
    with open(meminfo) as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024 / 1024
    return 0.0


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def workers(
    cpu: int, free_gib: float, override: str | None = None, lane: str = "integration"
) -> int:
    """The worker count: ``override`` when given, else min(cpu, free / per worker), at
    least 1."""
    if override not in (None, ""):
        if not override.isdigit() or int(override) < 1:
            raise ValueError(f"{ENV}={override!r}: a whole number of workers, 1 or more")
        return int(override)
    return max(1, min(cpu, int(free_gib // PER_WORKER_GIB)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lane", choices=("integration", "unit", "subset"), default="integration")
    args = ap.parse_args(argv)
    try:
        n = workers(cpus(), mem_available_gib(), os.environ.get(ENV), lane=args.lane)
    except ValueError as exc:
        print(f"pytest_workers: {exc}", file=sys.stderr)
        return 2
    print(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
