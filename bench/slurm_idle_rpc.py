#!/usr/bin/env python3
"""The load an idle controller puts on slurmctld, read from sdiag's RPC counts. Target
(issue 28): against a slurmctld with 2,000 nodes defined, an idle controller adds <= 6
RPCs per minute, whatever the node count.

Usage::

    .venv/bin/python bench/slurm_idle_rpc.py                    # 2,000 and 200 nodes, 360 s windows
    .venv/bin/python bench/slurm_idle_rpc.py --nodes 2000 --window 300
    .venv/bin/python bench/slurm_idle_rpc.py --measure node-source   # the watch alone
    .venv/bin/python bench/slurm_idle_rpc.py --smoke            # 50 nodes, 15 s windows, 10 s poll

Setup (all real; root): Debian's slurmctld 22.05 with munge and N nodes defined as
powered-down CLOUD nodes, listed by sinfo but never pinged, so slurmctld itself is quiet
(tests/harness/slurmbig.py says why not FUTURE nodes or nodes whose slurmd never runs).
They are idle with no reason: a healthy fleet, nothing for the controller to do.

What is measured (``--measure``):

- ``controller`` (the default): ``fleetmedic run --config`` with ``kind: slurm`` (partition
  ``gpu``, the default ``poll_interval`` unless ``--poll`` says, a ``state_dir`` of its
  own, leader election on, no SMTP), as deploy runs it. Its window starts once
  slurmctld has seen its first read and ``--settle`` seconds more have passed.
- ``node-source``: the controller's informer alone, ``controller.watcher.NodeWatcher`` on
  ``adapters.slurmcluster.SlurmCluster`` (the same ``sinfo --json`` poll) in a process
  of its own: what the loop adds on top of it is then not measured.

The figure: sdiag's "Remote Procedure Call statistics by message type" read before and
after a window (the counters are slurmctld's since it started); the difference per
minute, per type. Each snapshot's own REQUEST_STATS_INFO is taken out (an sdiag call is
counted once answered, so each window holds exactly one: the first snapshot's). The
baseline, measured in the same run over a window as long: the same slurmctld with
nothing attached. Reported: RPCs/min the controller adds (its window less the
baseline's), per type, per read (REQUEST_NODE_INFO counts the reads), slurmctld's own
serving time (sdiag's total_time) and CPU, at each node count; and what one call of the
Slurm tools the controller uses costs, per type and in serving time (``sinfo --json``,
the drain, the resume, ``squeue -h -w``, ``scontrol show node``, and the single-node
``sinfo -n`` to compare).

The default window (360 s) holds one end of the informer's 300 s watch, where a read
could be added; the poll itself is cut short at that end, so it adds none (measured).

Targets (full run): at every node count the added rate is <= 6/min, and the largest
count adds no more than the smallest plus one read's RPCs per window (a window's edges
can hold one read more or less).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

from fleetmedic.model.config.slurm import DEFAULT_POLL  # noqa: E402
from tests.harness.ctlenv import ControllerProcess, free_port  # noqa: E402
from tests.harness.slurm import SlurmError  # noqa: E402
from tests.harness.slurmbig import (  # noqa: E402
    PARTITION,
    STATS_RPC,
    BigSlurmCluster,
    RpcStats,
    SdiagError,
    counts_delta,
    micros_delta,
    rpc_delta,
    start_big,
)

TARGET_PER_MIN = 6.0
NODE_INFO = "REQUEST_NODE_INFO"


class BenchError(RuntimeError):
    """The bench could not measure (one line; exit 2)."""


def ctld_cpu(cluster: BigSlurmCluster) -> float:
    """slurmctld's CPU seconds so far (user + system, /proc/PID/stat)."""
    p = cluster.daemons["slurmctld"].popen
    assert p is not None
    fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Window:
    """sdiag's counters and slurmctld's CPU over ``seconds``: per type and per user (the
    snapshot's own RPC out), serving time, all per minute."""

    def __init__(self, cluster: BigSlurmCluster, seconds: float, alive=lambda: True) -> None:
        cpu0, t0, before = ctld_cpu(cluster), time.monotonic(), cluster.sdiag()
        while time.monotonic() - t0 < seconds:
            if not alive():
                raise BenchError("the measured process exited during the window")
            time.sleep(min(1.0, seconds - (time.monotonic() - t0)))
        after: RpcStats = cluster.sdiag()
        self.seconds = time.monotonic() - t0
        self.cpu = ctld_cpu(cluster) - cpu0
        self.rpcs = rpc_delta(before, after)
        self.users = counts_delta(before.user_count, after.user_count)
        self.micros = micros_delta(before, after)

    def per_min(self, n: float) -> float:
        return n * 60.0 / self.seconds

    @property
    def total(self) -> float:
        return self.per_min(sum(self.rpcs.values()))


def call_costs(cluster: BigSlurmCluster, calls: int) -> dict[str, dict]:
    """What one call of each Slurm tool the controller runs costs slurmctld: RPCs per
    type and serving time (sdiag's total_time, our snapshot's own left out), the mean
    of ``calls``. The single-node ``sinfo -n`` is there to compare: it is the one read
    that asks for one node only (REQUEST_NODE_INFO_SINGLE)."""
    node = cluster.defined_names()[0]
    tools: dict[str, list[str]] = {
        "sinfo --json": ["sinfo", "--json"],
        "sinfo -h -N -n X -o '%N %T %E'": ["sinfo", "-h", "-N", "-n", node, "-o", "%N %T %E"],
        "scontrol show node X": ["scontrol", "show", "node", node],
        "squeue -h -w X -o %i": ["squeue", "-h", "-w", node, "-o", "%i"],
        # the pair in turn, so every drain finds the node idle and every resume drained
        "scontrol update state=drain reason=...": [
            *("scontrol", "update", f"nodename={node}"),
            *("state=drain", "reason=fleetmedic: bench"),
        ],
        "scontrol update state=resume": ["scontrol", "update", f"nodename={node}", "state=resume"],
    }
    rpcs: dict[str, Counter[str]] = {k: Counter() for k in tools}
    micros: Counter[str] = Counter()
    for _ in range(calls):
        for what, argv in tools.items():
            before = cluster.sdiag()
            cluster.run(*argv)
            after = cluster.sdiag()
            rpcs[what] += rpc_delta(before, after)
            served = micros_delta(before, after)
            served.pop(STATS_RPC, None)
            micros[what] += sum(served.values())
    return {
        w: {
            "rpcs": sum(c.values()) / calls,
            "by_type": {t: n / calls for t, n in sorted(c.items())},
            "serving_ms": round(micros[w] / calls / 1000, 2),
        }
        for w, c in rpcs.items()
    }


def controller_config(cluster: BigSlurmCluster, work: Path, poll: float | None) -> Path:
    """``kind: slurm`` for the big cluster's partition; the rest at its defaults but for
    the paths (everything under ``work``) and a metrics port of its own."""
    data = {
        "kind": "slurm",
        "slurm": {
            "conf": str(cluster.conf),
            "partitions": [PARTITION],
            "reason_prefix": "fleetmedic:",
            "state_dir": str(work / "state"),
        },
        "ansible": {
            "playbook_dir": str(ROOT / "playbooks"),
            "config_file": str(ROOT / "ansible.cfg"),
            "run_dir": str(work / "runs"),
            "evidence_dir": str(work / "evidence"),
        },
        "metrics": {"address": "127.0.0.1", "port": free_port()},
    }
    if poll is not None:
        data["slurm"]["poll_interval"] = poll
    path = work / "controller.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class NodeSource:
    """``--measure node-source``: this script again as ``--node-source-child``."""

    def __init__(self, cluster: BigSlurmCluster, log: Path, poll: float) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--node-source-child", str(cluster.conf), str(poll)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def node_source_child(
    conf: str, poll: float
) -> int:  # pragma: no cover - runs as the measured process
    """The informer the controller's loop runs on, on the Slurm cluster, until SIGTERM."""
    import threading

    from fleetmedic.adapters.slurm import Slurm
    from fleetmedic.adapters.slurmcluster import SlurmCluster
    from fleetmedic.controller.watcher import NodeWatcher
    from fleetmedic.model.config import Config

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # The store holds Leases and ConfigMaps, which the informer never touches.
    cluster = SlurmCluster(
        Slurm(conf),
        Config().vocabulary(),
        store=None,  # type: ignore[arg-type]
        partitions=(PARTITION,),
        poll_interval=poll,
    )
    watcher: NodeWatcher = NodeWatcher(cluster)  # type: ignore[arg-type]
    watcher.start(stop)
    if watcher.synced.wait(120):
        print(f"node-source: synced, {len(watcher.snapshot())} nodes", flush=True)
    stop.wait()
    print(f"node-source: {cluster.reads} reads", flush=True)
    os._exit(0)  # (the watch thread sleeps out its poll: nothing of it is worth waiting for)
    return 0


def wait_first_read(cluster: BigSlurmCluster, alive, timeout: float, tail) -> None:
    """Until slurmctld has answered a node-info RPC the measured process sent. (These sdiag
    calls come before the window's first snapshot, so they are not in any window.)"""
    start = cluster.sdiag().count.get(NODE_INFO, 0)
    deadline = time.monotonic() + timeout
    while cluster.sdiag().count.get(NODE_INFO, 0) == start:
        if not alive():
            raise BenchError(f"the measured process exited before its first read:\n{tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"no node read in {timeout:.0f}s:\n{tail()}")
        time.sleep(0.5)


def measure(nodes: int, args, work: Path) -> dict:
    """One node count: costs per call, the baseline window, the measured window."""
    print(f"== {nodes} nodes", flush=True)
    cluster = start_big(nodes)
    try:
        print(f"  slurmctld with {nodes} CLOUD nodes up in {cluster.start_seconds:.1f}s")
        costs = call_costs(cluster, args.calls)
        for what, cost in costs.items():
            print(
                f"  one `{what}`: {cost['rpcs']:g} RPCs {cost['by_type']}, "
                f"slurmctld serving {cost['serving_ms']:.2f} ms"
            )
        base = Window(cluster, args.window)
        print(
            f"  baseline (nothing attached) {args.window:.0f}s: {base.total:.2f} RPCs/min "
            f"{dict(base.rpcs)}, slurmctld CPU {base.cpu:.2f}s"
        )
        d = work / str(nodes)
        d.mkdir()
        if args.measure == "controller":
            proc = ControllerProcess(controller_config(cluster, d, args.poll), d / "controller.log")
            proc.start()
            alive, tail = (lambda: proc.alive), proc.tail
        else:
            proc = NodeSource(cluster, d / "node-source.log", args.poll or DEFAULT_POLL)
            alive, tail = (lambda: proc.alive), proc.tail
        try:
            t0 = time.monotonic()
            wait_first_read(cluster, alive, args.startup, tail)
            print(
                f"  {args.measure}: first read after {time.monotonic() - t0:.1f}s; "
                f"settling {args.settle:.0f}s"
            )
            time.sleep(args.settle)
            if not alive():
                raise BenchError(f"the measured process exited while settling:\n{tail()}")
            win = Window(cluster, args.window, alive)
        finally:
            proc.stop()
        if args.keep:
            print(f"  {args.measure} log: {proc.log}")
    finally:
        cluster.stop()
    types = sorted(set(win.rpcs) | set(base.rpcs))
    added = {t: round(win.per_min(win.rpcs[t]) - base.per_min(base.rpcs[t]), 2) for t in types}
    reads = win.rpcs[NODE_INFO]
    result = {
        "nodes": nodes,
        "window_s": round(win.seconds, 1),
        "added_rpc_per_min": round(win.total - base.total, 2),
        "added_by_type_per_min": {t: v for t, v in added.items() if v},
        "reads_per_min": round(win.per_min(reads), 2),
        "rpcs_per_read": round(sum(win.rpcs.values()) / reads, 2) if reads else None,
        "baseline_rpc_per_min": round(base.total, 2),
        "baseline_by_type": dict(base.rpcs),
        "window_by_type": dict(win.rpcs),
        "window_by_user": dict(win.users),
        "ctld_serving_ms_per_min": round(win.per_min(sum(win.micros.values())) / 1000, 1),
        "ctld_cpu_s_per_min": round(win.per_min(win.cpu), 3),
        "baseline_ctld_cpu_s_per_min": round(base.per_min(base.cpu), 3),
        "cost_per_call": costs,
    }
    print(
        f"  {args.measure} {win.seconds:.0f}s: {dict(win.rpcs)} -> adds "
        f"{result['added_rpc_per_min']:.2f} RPCs/min ({result['reads_per_min']:.2f} reads/min, "
        f"{result['rpcs_per_read']} RPCs per read); slurmctld serving "
        f"{result['ctld_serving_ms_per_min']} ms/min, CPU {result['ctld_cpu_s_per_min']}s/min "
        f"(baseline {result['baseline_ctld_cpu_s_per_min']}s/min)",
        flush=True,
    )
    return result


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--node-source-child":
        return node_source_child(sys.argv[2], float(sys.argv[3]))
    ap = _common.parser(__doc__)
    ap.add_argument("--nodes", default="2000,200", help="node counts, comma-separated")
    ap.add_argument(
        "--window",
        type=float,
        default=360.0,
        help="seconds per window (the default holds one end of the informer's 300 s watch)",
    )
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after the first read")
    ap.add_argument("--startup", type=float, default=120.0, help="longest wait for a first read")
    ap.add_argument(
        "--poll", type=float, help="the controller's poll_interval (default: its own default)"
    )
    ap.add_argument("--calls", type=int, default=3, help="calls per tool for the cost per call")
    ap.add_argument("--measure", choices=("controller", "node-source"), default="controller")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    if args.smoke:
        # a poll shorter than the window, so the window holds a read however they align
        args.nodes, args.window, args.settle, args.calls, args.poll = "50", 15.0, 1.0, 1, 10.0
    try:
        counts = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        print(f"slurm_idle_rpc: --nodes: not a list of numbers: {args.nodes!r}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="fleetmedic-bench-slurmrpc-"))
    results = []
    try:
        for n in counts:
            results.append(measure(n, args, work))
    except (BenchError, SlurmError, SdiagError) as exc:
        print(f"slurm_idle_rpc: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    print(
        json.dumps(
            {
                "measured": args.measure,
                "poll_interval_s": args.poll or DEFAULT_POLL,
                "runs": results,
            }
        )
    )
    smallest = min(results, key=lambda r: r["nodes"])
    largest = max(results, key=lambda r: r["nodes"])
    one_read = (smallest["rpcs_per_read"] or 0) * 60.0 / smallest["window_s"]
    targets = [
        (
            f"adds <= {TARGET_PER_MIN:g} RPCs/min at {r['nodes']} nodes "
            f"({r['added_rpc_per_min']:.2f})",
            r["added_rpc_per_min"] <= TARGET_PER_MIN,
        )
        for r in results
    ]
    if largest is not smallest:
        targets.append(
            (
                f"{largest['nodes']} nodes add no more than {smallest['nodes']} nodes plus one "
                f"read per window ({largest['added_rpc_per_min']:.2f} vs "
                f"{smallest['added_rpc_per_min']:.2f} + {one_read:.2f})",
                largest["added_rpc_per_min"] <= smallest["added_rpc_per_min"] + one_read + 1e-9,
            )
        )
    empty = [
        r["nodes"]
        for r in results
        if not r["window_by_type"].get(NODE_INFO) or not math.isfinite(r["added_rpc_per_min"])
    ]
    if empty:
        print(
            f"slurm_idle_rpc: error: at {empty} nodes the window holds no read by the measured "
            "process (or its figure is not finite): nothing was measured",
            file=sys.stderr,
        )
        return 2
    if args.smoke:  # (a 10 s poll: the 6/min budget is for the default poll)
        targets = [("a read in the window, figures finite", True)]
    return _common.verdict(targets, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
