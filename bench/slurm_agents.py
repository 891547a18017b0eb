#!/usr/bin/env python3
"""What a fleet of fleetmedic agents costs slurmctld: RPCs a minute (by type) and CPU
seconds a minute, 2,000 agents at the default round (60 s), healthy and with 1 % of the
nodes failing a check; the old read path beside the new one in the same run (issue 37).

Usage::

    .venv/bin/python bench/slurm_agents.py                 # 2,000 nodes, 10 rounds
    .venv/bin/python bench/slurm_agents.py --nodes 500 --rounds 5
    .venv/bin/python bench/slurm_agents.py --smoke         # 50 nodes, 2 rounds

Setup (root; real parts): slurmctld 22.05 with N powered-down CLOUD nodes
(tests/harness/slurmbig.py: listed by sinfo, never pinged, so slurmctld is otherwise
quiet). Each node gets a real agent, ``fleetmedic.agent.loop.Agent`` with its writer and
the Slurm adapter exactly as ``fleetmedic agent --slurm-conf`` builds them, each Slurm
call a real ``sinfo``/``scontrol`` process. Only the checks are canned (every round's
``run_checks`` returns one GPU result, ``ok``, or ``problem`` on the failing nodes): the
checks read NVML and the kernel, never slurmctld, and 2,000 of them do not fit in one
process on two CPUs. Time runs on each agent's own clock, a minute per round, spread so
the agents' reads fall on different rounds as they would on a fleet started over time:
a fleet-round (every agent's round once) is one minute of the fleet. The agents run one
after another, so the wall time of a fleet-round is not a minute: the figures are per
fleet-round, that is per minute at the default interval.

Measured per phase, from sdiag's RPC counts by type (tests/harness/slurmbig.py parses
them; the bench's own sdiag calls are taken out) and slurmctld's CPU time
(``/proc/<pid>/stat``, utime + stime, 10 ms ticks):

- ``new, healthy``: the new path (the single-node read, through the Slurm library as
  the agent makes it by default, adapters/slurmlib.py, where ``sinfo`` links one, else
  ``sinfo -n``, adapters/slurmread.py; the agent's kept view, ``slurm.read_every``
  300 s), every node healthy, after one warm-up round (each agent's first read). One
  library process serves every agent here: each read is the same RPC as on a node;
- ``new, 1 % failing``: the same with 1 % of the nodes failing a GPU check every round
  (three strikes, a fence, then rounds under our drain);
- ``old, healthy``: the old path (``sinfo --json`` of the whole cluster twice a round,
  as before this change: adapters/slurmread.sinfo_json_whole with no kept view), on a
  sample of agents, scaled to the fleet (each whole read costs the same at any agent).
- the baseline: slurmctld with nothing attached over a window as long as the longest.

And what each candidate single-node read costs on 22.05 (per call: RPCs by type,
slurmctld serving time, its CPU, the client's wall time), the choice of
adapters/slurmread.py.

Targets (full run, 2,000 nodes): a healthy fleet adds <= 1 RPC per agent per round,
reads and writes together; every read is single-node (no REQUEST_NODE_INFO); an
unchanged round writes nothing (no REQUEST_UPDATE_NODE when healthy); slurmctld's CPU
added <= 5 % of one core (3 CPU-s a minute).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "controller"))

import _common  # noqa: E402

from fleetmedic.adapters import slurmlib, slurmread  # noqa: E402
from fleetmedic.adapters.slurm import Slurm  # noqa: E402
from fleetmedic.adapters.slurmdoc import SlurmNodeDocs  # noqa: E402
from fleetmedic.agent import loop  # noqa: E402
from fleetmedic.agent.config import AgentConfig, SlurmAgentConfig  # noqa: E402
from fleetmedic.checks.base import CheckResult  # noqa: E402
from tests.harness.slurmbig import (  # noqa: E402
    BigSlurmCluster,
    micros_delta,
    rpc_delta,
    start_big,
)

ROUND = 60.0  # the agent's default interval
READ_EVERY = SlurmAgentConfig().read_every
TICK = os.sysconf("SC_CLK_TCK")
T0 = 1_000_000.0


def canned(failing: bool):
    """``run_checks`` for one agent's round: one GPU result (see the module doc)."""

    def run_checks(cfg, categories=None, env=None, memory=None) -> list[CheckResult]:
        if categories is not None and "gpu" not in categories:
            return []  # (under our drain the agent asks for the network checks only)
        if failing:
            return [CheckResult("nvidia.ecc", "problem", "GPU 0: 2 uncorrectable ECC errors")]
        return [CheckResult("nvidia.ecc", "ok", "no uncorrectable ECC errors")]

    return run_checks


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Window:
    rpcs: Counter
    micros: Counter
    cpu: float  # slurmctld CPU seconds
    wall: float

    @property
    def total(self) -> int:
        return sum(self.rpcs.values())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Meter:
    """sdiag and slurmctld's CPU time around a piece of work."""

    def __init__(self, cluster: BigSlurmCluster) -> None:
        self.c = cluster
        popen = cluster.daemons["slurmctld"].popen
        assert popen is not None
        self.pid = popen.pid

    def start(self) -> tuple:
        return self.c.sdiag(), cpu_seconds(self.pid), time.monotonic()

    def stop(self, started: tuple) -> Window:
        before, cpu0, t0 = started
        wall = time.monotonic() - t0
        cpu = cpu_seconds(self.pid) - cpu0
        after = self.c.sdiag()
        return Window(rpc_delta(before, after), micros_delta(before, after), cpu, wall)


class Fleet:
    """One agent per node, built as ``fleetmedic agent --slurm-conf`` builds it."""

    def __init__(
        self,
        cluster: BigSlurmCluster,
        names: list[str],
        *,
        old: bool,
        failing: set[str],
        reader: slurmlib.LibraryReader | None = None,
    ) -> None:
        self.agents = []
        base = AgentConfig(slurm=SlurmAgentConfig(read_every=0 if old else READ_EVERY))
        checks = dataclasses.replace(base.checks, vendor="nvidia")
        spread = max(1, int(READ_EVERY // ROUND))
        for i, name in enumerate(names):
            slurm = Slurm(str(cluster.conf), reader=slurmread.sinfo_json_whole if old else None)
            if reader is not None:
                slurm.use_reader(reader)  # (one child serves them all: the same RPCs a read)
            # each agent's first read falls on another minute of the read_every cycle
            clock = Clock(T0 - (i % spread) * ROUND)
            assert base.slurm is not None
            docs = SlurmNodeDocs(
                slurm, base.vocabulary(), read_every=base.slurm.read_every, clock=clock
            )
            agent = loop.Agent(dataclasses.replace(base, node_name=name, checks=checks), docs)
            self.agents.append((agent, clock, canned(name in failing)))

    def round(self) -> None:
        """One fleet-round: every agent's round once, then a minute on every clock."""
        for agent, clock, checks in self.agents:
            loop.run_checks = checks  # (the one stand-in: see the module doc)
            agent.round()
            clock.t += ROUND

    def warm_up(self) -> None:
        """Every agent's first round (its first read, its vendor recorded), each at its
        own minute of the read_every cycle, then every clock at the same time: the kept
        views are of every age from 0 to read_every, as on a fleet started over time."""
        self.round()
        now = max(clock.t for _, clock, _ in self.agents)
        for _, clock, _ in self.agents:
            clock.t = now


def candidates(
    cluster: BigSlurmCluster, meter: Meter, calls: int, reader: slurmlib.LibraryReader | None
) -> list[tuple[str, Window]]:
    """What one call of each candidate single-node read costs (see the module doc)."""
    node = cluster.defined_names()[len(cluster.defined_names()) // 2]
    env = {**os.environ, **cluster.env, "SLURM_TIME_FORMAT": "%s"}
    argvs = {
        "sinfo --json (whole cluster)": ["sinfo", "--json"],
        "scontrol show node N (text)": ["scontrol", "show", "node", node],
        "sinfo -n N -h -o %N|%T|%E (text)": ["sinfo", "-n", node, "-h", "-o", "%N|%T|%E"],
        "sinfo -n N -N -h -O <fields> (ours)": ["sinfo", *slurmread.sinfo_single_argv(node)],
    }
    out = []
    for what, argv in argvs.items():
        started = meter.start()
        for _ in range(calls):
            subprocess.run(argv, env=env, check=True, capture_output=True)
        out.append((what, meter.stop(started)))
    if reader is not None:
        run = Slurm(str(cluster.conf))._run  # (sinfo, for the reader's first-read check)
        reader(run, node)
        started = meter.start()
        for _ in range(calls):
            reader(run, node)
        out.append(("the library's read (agents' default)", meter.stop(started)))
    return out


def per_min(w: Window, rounds: int, scale: float = 1.0) -> tuple[float, float]:
    """(RPCs, CPU-s) per fleet-round, i.e. per minute at the default interval."""
    return w.total * scale / rounds, w.cpu * scale / rounds


def main() -> int:
    ap = _common.parser(__doc__)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--old-sample", type=int, default=20, help="agents on the old path")
    ap.add_argument("--calls", type=int, default=20, help="calls per candidate read")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.rounds, args.old_sample, args.calls = 50, 2, 5, 3
    load = os.getloadavg()
    cluster = start_big(args.nodes)
    try:
        return _run(cluster, args, load)
    finally:
        cluster.stop()


def _run(cluster: BigSlurmCluster, args, load: tuple[float, float, float]) -> int:
    meter = Meter(cluster)
    names = cluster.defined_names()
    n = len(names)
    print(f"slurmctld 22.05 with {n} CLOUD nodes; {args.rounds} fleet-rounds of {ROUND:.0f} s")
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")

    library = slurmlib.library_of()
    reader = slurmlib.LibraryReader(library, cluster.env, 30.0) if library else None
    try:
        return _measure(cluster, args, meter, names, reader)
    finally:
        if reader is not None:
            reader.close()


def _measure(cluster, args, meter: Meter, names: list[str], reader) -> int:
    n = len(names)
    print("\nwhat one call costs (per call, at this node count):")
    for what, w in candidates(cluster, meter, args.calls, reader):
        rpcs = ", ".join(f"{k} {v / args.calls:g}" for k, v in sorted(w.rpcs.items()))
        served = sum(w.micros.values()) / args.calls / 1000
        print(
            f"  {what:38s} {w.total / args.calls:g} RPCs ({rpcs}); served {served:.2f} ms, "
            f"slurmctld CPU {w.cpu / args.calls * 1000:.1f} ms, "
            f"wall {w.wall / args.calls * 1000:.1f} ms"
        )

    # -- new path, healthy -------------------------------------------------------------
    print(
        "\nthe new path reads through "
        + (f"the Slurm library ({reader.library}, adapters/slurmlib.py)" if reader else "sinfo -n")
    )
    fleet = Fleet(cluster, names, old=False, failing=set(), reader=reader)
    fleet.warm_up()
    started = meter.start()
    for _ in range(args.rounds):
        fleet.round()
    healthy = meter.stop(started)

    # -- new path, 1 % failing ---------------------------------------------------------
    cluster.reset_nodes()
    failing_nodes = set(names[:: max(1, n // max(1, n // 100))][: max(1, n // 100)])
    fleet = Fleet(cluster, names, old=False, failing=failing_nodes, reader=reader)
    fleet.warm_up()
    started = meter.start()
    for _ in range(args.rounds):
        fleet.round()
    failing = meter.stop(started)
    fenced = sum(1 for x in cluster.nodes().values() if x["reason"].startswith("fleetmedic:"))
    cluster.reset_nodes()

    # -- old path, healthy, on a sample ------------------------------------------------
    sample = names[: args.old_sample]
    old_fleet = Fleet(cluster, sample, old=True, failing=set())
    old_fleet.warm_up()
    old_rounds = 2
    started = meter.start()
    for _ in range(old_rounds):
        old_fleet.round()
    old = meter.stop(started)
    scale = n / len(sample)

    # -- baseline ------------------------------------------------------------------------
    idle_for = min(60.0, max(healthy.wall, failing.wall, 5.0))
    started = meter.start()
    time.sleep(idle_for)
    idle = meter.stop(started)
    base_rpm = idle.total / idle.wall * 60
    base_cpu = idle.cpu / idle.wall * 60

    rows = [
        ("new, healthy", healthy, args.rounds, 1.0),
        ("new, 1 % failing", failing, args.rounds, 1.0),
        ("old, healthy (sampled)", old, old_rounds, scale),
    ]
    print(f"\n{n} agents, per minute at the default {ROUND:.0f} s round (baseline subtracted):")
    head = ("path", "RPCs/min", "per agent-round", "CPU-s/min", "% core")
    print("  {:26s} {:>10s} {:>16s} {:>10s} {:>7s}".format(*head))
    figures = {}
    for what, w, rounds, sc in rows:
        rpm, cpu = per_min(w, rounds, sc)
        rpm -= base_rpm * w.wall / rounds / 60  # (the baseline's RPCs in the same wall time)
        cpu = max(0.0, cpu - base_cpu * w.wall / rounds / 60)
        figures[what] = (rpm, cpu, w)
        print(f"  {what:26s} {rpm:10.1f} {rpm / n:16.3f} {cpu:10.2f} {cpu / 60 * 100:6.1f}%")
        for typ, count in sorted(w.rpcs.items()):
            print(f"      {typ:32s} {count * sc / rounds:10.1f}/min")
    print(f"  baseline (nothing attached): {base_rpm:.2f} RPCs/min, {base_cpu:.3f} CPU-s/min")
    print(f"  1 % failing: {len(failing_nodes)} nodes, {fenced} fenced by the end")
    rpm_old = figures["old, healthy (sampled)"][0]
    rpm_new = figures["new, healthy"][0]
    print(f"  old/new RPCs: {rpm_old / max(rpm_new, 1e-9):.1f}x")
    after = os.getloadavg()
    print(f"load average after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}")

    new_types = set(healthy.rpcs) | set(failing.rpcs)
    return _common.verdict(
        [
            ("healthy: <= 1 RPC per agent per round", rpm_new / n <= 1.0),
            ("every read single-node (no REQUEST_NODE_INFO)", "REQUEST_NODE_INFO" not in new_types),
            ("an unchanged round writes nothing", "REQUEST_UPDATE_NODE" not in healthy.rpcs),
            ("slurmctld CPU added <= 5 % of one core", figures["new, healthy"][1] <= 3.0),
            ("1 % failing: the failing nodes fenced", fenced == len(failing_nodes)),
        ],
        args.smoke,
    )


if __name__ == "__main__":
    sys.exit(main())
