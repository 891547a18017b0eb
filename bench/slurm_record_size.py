#!/usr/bin/env python3
"""What the repair record in Extra costs the controller's poll: one ``sinfo --json`` of a
2,000-node cluster whose every node carries a record of the largest size we allow
(``adapters.slurmrecord.RECORD_MAX``), against the same cluster with no record at all and with a
typical one, in the same run (issue 37).

Usage::

    .venv/bin/python bench/slurm_record_size.py               # 2,000 nodes, 10 reads each
    .venv/bin/python bench/slurm_record_size.py --sizes 4096,8192,16384,32768
    .venv/bin/python bench/slurm_record_size.py --smoke       # 50 nodes, 2 reads each

Setup (root; real parts): slurmctld 22.05 with N powered-down CLOUD nodes
(tests/harness/slurmbig.py). Every node's Extra is set with one ``scontrol update
nodename=gpu[0001-N] extra=...`` to a record built as the controller builds it: our
record (``{"fleetmedic": {...}}``) with an in-flight marker, last results, the last
finding, strikes, and attempts in the history, each attempt's message at its longest
(policy/history.MESSAGE_LIMIT), as many attempts as fit the size; the record is written
through the adapter's own fitting (adapters/slurmrecord.fitted), so it is never larger than
what the adapter would write.

Measured per size, the median of the reads: the wall time of the controller's read as
the controller makes it (``Slurm.nodes()``: ``sinfo --json`` and its parse in Python),
the bytes sinfo printed, slurmctld's serving time for the read (sdiag's total_time of
REQUEST_NODE_INFO and REQUEST_PARTITION_INFO) and slurmctld's CPU time
(``/proc/<pid>/stat``). The baseline: the same read with no record on any node. At the
default ``poll_interval`` (30 s) the controller reads twice a minute: the last column is
what that costs slurmctld per minute, as a share of one core.

Target (full run): at RECORD_MAX on every node, the poll costs slurmctld <= 5 % of one
core, and one read takes <= 10 s of wall time (a third of the poll interval).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "controller"))

import _common  # noqa: E402

from fleetmedic.adapters.slurm import Slurm  # noqa: E402
from fleetmedic.adapters.slurmrecord import RECORD_KEY, RECORD_MAX, fitted  # noqa: E402
from fleetmedic.model import keys  # noqa: E402
from fleetmedic.model.config.slurm import DEFAULT_POLL  # noqa: E402
from fleetmedic.policy.history import MESSAGE_LIMIT  # noqa: E402
from tests.harness.slurmbig import hostlist, micros_delta, rpc_delta, start_big  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def record(size: int) -> str:
    """Extra holding our record of at most ``size`` bytes (see the module doc)."""
    attempt = {
        "ep": 1,
        "step": "reboot",
        "attempt": 1,
        "start": "2026-11-28T12:00:00Z",
        "end": "2026-11-28T12:09:30Z",
        "result": "fail",
        "run_id": "0f3c6a2e-91d4-4c55-9d2a-6b2b8c1d7e01",
        "message": "x" * MESSAGE_LIMIT,
    }
    rec = {
        keys.ANN_IN_FLIGHT: json.dumps(
            {
                "ep": 3,
                "step": "reimage",
                "attempt": 1,
                "phase": "reinstall",
                "status": "running",
                "step_start": "2026-11-28T12:00:00Z",
                "since": "2026-11-28T12:00:05Z",
            }
        ),
        keys.ANN_STRIKES: '{"gpu":3,"network":0}',
        keys.ANN_LAST_RESULTS: json.dumps(
            {"gpu": {"status": "problem", "detail": "y" * 400}, "network": {"status": "ok"}}
        ),
        keys.ANN_LAST_FINDING: json.dumps(
            {"rule": "xid.79", "pci": "0000:3b:00", "msg": "z" * 200}
        ),
    }
    history: list[dict] = []
    text = fitted("bench", {RECORD_KEY: {**rec, keys.ANN_HISTORY: "[]"}})
    while True:
        history.append(attempt)
        doc = {RECORD_KEY: {**rec, keys.ANN_HISTORY: json.dumps(history)}}
        bigger = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        if len(bigger.encode()) > size or len(history) > 200:
            return text
        text = bigger


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> int:
    ap = _common.parser(__doc__)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--reads", type=int, default=10)
    ap.add_argument("--sizes", default=f"1024,4096,{RECORD_MAX}", help="record sizes, bytes")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.reads = 50, 2
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cluster = start_big(args.nodes)
    try:
        popen = cluster.daemons["slurmctld"].popen
        assert popen is not None
        pid = popen.pid
        slurm = Slurm(str(cluster.conf))
        rows = []
        for size in [0, *sizes]:
            extra = record(size) if size else ""
            cluster.run("scontrol", "update", f"nodename={hostlist(args.nodes)}", f"extra={extra}")
            walls, outs, served, cpus = [], [], [], []
            for _ in range(args.reads):
                before, cpu0, t0 = cluster.sdiag(), cpu_seconds(pid), time.perf_counter()
                nodes = slurm.nodes()
                walls.append(time.perf_counter() - t0)
                cpus.append(cpu_seconds(pid) - cpu0)
                after = cluster.sdiag()
                assert rpc_delta(before, after).get("REQUEST_NODE_INFO") == 1
                served.append(sum(micros_delta(before, after).values()) / 1e6)
                assert len(nodes) == args.nodes and nodes[0].extra == extra
            out = subprocess.run(["sinfo", "--json"], env={**os.environ, **cluster.env},
                                 capture_output=True, check=True).stdout  # fmt: skip
            outs.append(len(out))
            rows.append((size, len(extra.encode()), statistics.median(walls), max(outs),
                         statistics.median(served), sum(cpus) / len(cpus)))  # fmt: skip
    finally:
        cluster.stop()
    base = rows[0]
    reads_per_min = 60 / DEFAULT_POLL
    print(f"\nsinfo --json of {args.nodes} nodes, every node with the same Extra "
          f"(median of {args.reads} reads; RECORD_MAX = {RECORD_MAX}):")  # fmt: skip
    print("  record size   sinfo bytes   read wall (x none)   served   slurmctld CPU/read   "
          f"CPU at {reads_per_min:g} reads/min")  # fmt: skip
    for _size, real, wall, out, served, cpu in rows:
        share = cpu * reads_per_min / 60 * 100
        print(f"  {real:8d} B  {out / 1e6:9.1f} MB   {wall:7.2f} s ({wall / base[2]:5.1f}x)   "
              f"{served * 1000:6.1f} ms   {cpu * 1000:10.0f} ms   {share:9.2f} % core")  # fmt: skip
    worst = rows[-1]
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return _common.verdict(
        [
            ("RECORD_MAX on every node: poll <= 5 % of a core", worst[5] * reads_per_min <= 3.0),
            ("RECORD_MAX on every node: one read <= 10 s", worst[2] <= 10.0),
        ],
        args.smoke,
    )


if __name__ == "__main__":
    sys.exit(main())
