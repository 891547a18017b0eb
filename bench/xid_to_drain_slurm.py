#!/usr/bin/env python3
"""Xid 79 to drained on Slurm: from a line written to a node's kernel log to the drain
with our reason visible in ``sinfo``, through ``fleetmedic agent --slurm-conf``. Target:
p99 <= 1 s over 50 trials (the same target as the Kubernetes taint, bench/xid_to_taint.py).

Usage::

    .venv/bin/python bench/xid_to_drain_slurm.py               # 50 trials
    .venv/bin/python bench/xid_to_drain_slurm.py --smoke       # 1 trial, target not enforced

Setup (all real, nothing mocked): a one-node Slurm cluster of Debian's slurmctld and
slurmd with munge (tests/harness/slurm.py; root, and scripts/setup.d/36-slurm.apt), and
``fleetmedic agent --slurm-conf`` as a separate process following a kernel log file
(``--kernel-log FILE``, the agent's default 0.1 s poll bound, inotify wakes it first).

Each trial: the node is resumed (as the controller does after a repair) and seen without
a reason; then a Xid 79 line for a GPU not used before (so no dedup applies) is appended
and flushed, and the clock runs until ``sinfo -h -n n1 -o %E`` (polled every 10 ms)
shows our reason. The poll's own round trip is part of the figure.

Baseline, measured in the same run: one bare ``scontrol update nodename=n1 comment=...``
round trip (the write the agent's fence is, as a process), median of 20. The figure is
printed as a ratio to it, so it does not depend on the machine.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402
from _taint import report  # noqa: E402

from tests.harness.agentenv import FLEETMEDIC, AgentProcess, append, banner, xid_line  # noqa: E402
from tests.harness.slurm import start_cluster  # noqa: E402

PREFIX = "fleetmedic: reboot: xid.79"


def main() -> int:
    ap = _common.parser(__doc__)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (agent log)")
    args = ap.parse_args()
    if args.smoke:
        args.trials = 1
    work = Path(tempfile.mkdtemp(prefix="fleetmedic-bench-slurm-"))
    kern = work / "kern.log"
    kern.write_text(banner() + "[    1.000000] kernel: clean boot\n")
    (work / "boot_id").write_text(f"{uuid.uuid4()}\n")
    cluster = start_cluster(1)
    env = {**os.environ, **cluster.env}

    def tool(*argv: str) -> str:
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout

    def reason() -> str:
        text = tool("sinfo", "-h", "-n", "n1", "-o", "%E").strip()
        return "" if text == "none" else text  # (sinfo's word for no reason)

    try:
        baseline_times = []
        for i in range(20):
            t0 = time.perf_counter()
            tool("scontrol", "update", "nodename=n1", f"comment=bench {i}")
            baseline_times.append(time.perf_counter() - t0)
        tool("scontrol", "update", "nodename=n1", "comment=")
        baseline = statistics.median(baseline_times)
        agent = AgentProcess("n1", work / "unused", work / "agent.log")
        agent.argv = [
            str(FLEETMEDIC),
            "agent",
            "--node-name",
            "n1",
            "--slurm-conf",
            str(cluster.conf),
            "--config",
            "/dev/null",
            "--kernel-log",
            str(kern),
            "--boot-id-file",
            str(work / "boot_id"),
            "--vendor",
            "none",
            "--interval",
            "60",
        ]
        agent.env = {**agent.env, "SLURM_CONF": ""}
        agent.start()
        latencies = []
        try:
            deadline = time.monotonic() + 120
            while ": following (" not in agent.output():
                if time.monotonic() > deadline or not agent.alive():
                    print(f"agent did not start:\n{agent.tail()}", file=sys.stderr)
                    return 2
                time.sleep(0.05)
            time.sleep(1.0)  # the agent's first round is written
            for i in range(args.trials):
                if reason():
                    tool("scontrol", "update", "nodename=n1", "state=resume")
                while reason():
                    time.sleep(0.01)
                time.sleep(0.05 + 0.1 * (i % 7) / 7)  # spread the writes over the poll phase
                t0 = time.monotonic()
                append(kern, xid_line(bus=0x10 + i % 0xE0, uptime=100.0 + i))
                while not reason().startswith(PREFIX):
                    if time.monotonic() - t0 > 30:
                        print(f"no drain after 30 s:\n{agent.tail()}", file=sys.stderr)
                        return 2
                    time.sleep(0.01)
                latencies.append(time.monotonic() - t0)
        finally:
            agent.stop()
    finally:
        cluster.stop()
    p99 = report(
        "Xid 79 line -> our drain visible in sinfo",
        latencies,
        baseline,
        "one bare scontrol update (median of 20)",
        "scontrol_update_s",
    )
    if args.keep:
        print(f"  work dir: {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return _common.verdict([("p99 <= 1 s", p99 <= 1.0)], args.smoke)


if __name__ == "__main__":
    sys.exit(main())
