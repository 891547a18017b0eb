"""A real slurmctld with many nodes defined and no slurmd: the load benches' cluster.

    with start_big(2000) as c:                   # gpu[0001-2000] in partition gpu
        c.env                                    # {"SLURM_CONF": ...}
        c.run("sdiag")                           # slurmctld's RPC counts
        len(c.nodes())                           # 2000: sinfo --json lists them all

It is the cluster of tests/harness/slurm.py (munged with its own key, Debian's slurmctld
22.05 on a free port, its own StateSaveLocation, the same record and cleanup) with the
nodes swapped: ``defined`` nodes ``gpu0001``.. that exist only in slurm.conf, as
``State=CLOUD`` with ``PrivateData=cloud``. No netns, no bridge, no slurmd: slurmctld is
reached on 127.0.0.1.

Why CLOUD (measured here on Slurm 22.05.8, 2026-11-27):

- CLOUD nodes start powered down: slurmctld neither pings them nor asks them to
  register. With 2,000 of them an idle slurmctld received no RPC in a 60 s window
  (sdiag) and used 0.03 s of CPU.
- ``PrivateData=cloud`` makes sinfo list powered-down cloud nodes; ``sinfo --json``
  gives each as ``state: idle``, ``state_flags: ["CLOUD", "POWERED_DOWN"]``, no reason,
  in partition ``gpu`` (sinfo: ``idle~``): 2,000 nodes for a reader to parse, none of
  them a fault. Without it sinfo lists none of them (0 nodes, partition ``n/a``).
- ``State=FUTURE`` nodes are not listed by sinfo at all (0 nodes, as above), so a
  reader would read nothing.
- Nodes of the default state (UNKNOWN) whose slurmd never runs are listed, but slurmctld
  keeps trying them: 2,000 such nodes took 3.85 s of its CPU in 90 s (about 85 times the
  CLOUD nodes'), with agent threads busy on the failed connections, and sinfo shows them
  ``unknown`` + NOT_RESPONDING: not an idle healthy fleet, and a busy slurmctld.

The drain and resume a controller sends work on these nodes too (``drained~``, then
``idle~`` again), so the cost of each Slurm tool can be measured on them.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.harness import slurm
from tests.harness.slurm import SLURM_ROOT, SlurmCluster, SlurmError, lock, read_record

PARTITION = "gpu"
STATS_RPC = "REQUEST_STATS_INFO"  # what sdiag itself sends (counted after it is answered)

# One line of sdiag's RPC tables, by type or by user:
#   "\tREQUEST_NODE_INFO        ( 2007) count:3      ave_time:8295   total_time:24886"
#   "\troot            (       0) count:7      ave_time:3718   total_time:26026"
_RPC_LINE = re.compile(
    r"^\s+(?P<name>\S+)\s+\(\s*(?P<id>\d+)\)\s+count:(?P<count>\d+)\s+"
    r"ave_time:(?P<ave>\d+)\s+total_time:(?P<total>\d+)\s*$"
)
_BY_TYPE = "Remote Procedure Call statistics by message type"
_BY_USER = "Remote Procedure Call statistics by user"
_TAKEN = re.compile(r"^sdiag output at .*\((\d+)\)\s*$", re.M)


def node_names(defined: int) -> list[str]:
    width = max(4, len(str(defined)))
    return [f"gpu{i:0{width}d}" for i in range(1, defined + 1)]


def hostlist(defined: int) -> str:
    """Slurm's compact form of :func:`node_names` (``gpu[0001-2000]``)."""
    width = max(4, len(str(defined)))
    return f"gpu[{1:0{width}d}-{defined:0{width}d}]" if defined > 1 else node_names(1)[0]


@dataclass
class BigSlurmCluster(SlurmCluster):
    """slurmctld only, ``defined`` CLOUD nodes; see the module docstring. ``node_names``
    stays empty (no slurmd to start or wait for); :meth:`defined_names` lists the nodes."""

    defined: int = 2000

    @property
    def host_address(self) -> str:
        return "127.0.0.1"  # no bridge: nothing but clients on this host reach slurmctld

    def defined_names(self) -> list[str]:
        return node_names(self.defined)

    def slurm_conf(self) -> str:
        """The base cluster's slurm.conf (no node lines: ``node_names`` is empty) with the
        defined nodes and their partition in place of the base's empty one."""
        base = super().slurm_conf()
        empty = f"PartitionName={PARTITION} Nodes= "
        if empty not in base:
            raise SlurmError(f"tests/harness/slurm.py's slurm.conf has no '{empty}' line")
        nodes = (
            "# Defined only: powered-down cloud nodes are neither pinged nor hidden from sinfo\n"
            "PrivateData=cloud\n"
            f"NodeName={hostlist(self.defined)} CPUs=2 RealMemory=1000 State=CLOUD\n"
        )
        return base.replace(
            empty, f"{nodes}PartitionName={PARTITION} Nodes={hostlist(self.defined)} "
        )

    def _record(self) -> dict:
        rec = super()._record()
        rec["netns"], rec["links"] = [], []  # none made; the octet is not reserved either
        rec["nodes"] = [hostlist(self.defined)]
        return rec

    def sdiag(self) -> RpcStats:
        return parse_sdiag(self.run("sdiag"))

    def wait_defined(self, timeout: float = 60.0) -> float:
        """Wait until ``sinfo --json`` lists every defined node. Returns the seconds."""
        t0 = time.monotonic()
        want = self.defined
        got = 0
        while True:
            try:
                got = len(self.nodes())
            except (SlurmError, ValueError, KeyError):
                got = 0
            if got == want:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise SlurmError(f"sinfo lists {got} of {want} nodes after {timeout:.0f}s")
            time.sleep(0.2)


class SdiagError(ValueError):
    """sdiag's output is not the shape this parser knows (one line saying what is off)."""


@dataclass(frozen=True)
class RpcStats:
    """sdiag's RPC counters at one moment: per message type and per user, the count and
    the total time slurmctld spent serving them (microseconds), since slurmctld started
    (or ``sdiag --reset``). ``taken``: sdiag's own timestamp (epoch seconds)."""

    taken: int
    count: dict[str, int] = field(default_factory=dict)
    micros: dict[str, int] = field(default_factory=dict)
    user_count: dict[str, int] = field(default_factory=dict)


def parse_sdiag(text: str) -> RpcStats:
    """The RPC tables of ``sdiag``'s text output (22.05: "Remote Procedure Call statistics
    by message type", then "... by user", then "Pending RPC statistics"). A type with no
    RPC yet has no line. Raises SdiagError when a table's heading is missing or a line in
    a table does not parse (a format we have not seen: better loud than a zero)."""
    taken = _TAKEN.search(text)
    if not taken:
        raise SdiagError("no 'sdiag output at ... (epoch)' line")
    if _BY_TYPE not in text or _BY_USER not in text:
        raise SdiagError(f"no '{_BY_TYPE}' or '... by user' table")
    stats = RpcStats(int(taken.group(1)))
    table: dict[str, int] | None = None
    for line in text.splitlines():
        if line.startswith(_BY_TYPE):
            table = stats.count
            continue
        if line.startswith(_BY_USER):
            table = stats.user_count
            continue
        if table is None:
            continue
        if not line.strip():
            if table is stats.user_count:
                break  # the user table ends the RPC part; pending RPCs follow
            continue
        if not line[:1].isspace():
            break  # the next heading
        m = _RPC_LINE.match(line)
        if not m:
            raise SdiagError(f"an RPC line that does not parse: {line.strip()!r}")
        table[m["name"]] = int(m["count"])
        if table is stats.count:
            stats.micros[m["name"]] = int(m["total"])
    if not stats.user_count and stats.count:
        raise SdiagError("RPCs counted by type but none by user")
    return stats


def counts_delta(before: dict[str, int], after: dict[str, int]) -> Counter[str]:
    """Per key, how much a counter grew between two snapshots (keys that did not grow are
    left out). Raises SdiagError when one went down: slurmctld restarted in between, or
    someone ran ``sdiag --reset``."""
    delta: Counter[str] = Counter()
    for name in set(before) | set(after):
        d = after.get(name, 0) - before.get(name, 0)
        if d < 0:
            raise SdiagError(
                f"{name} went from {before[name]} to {after.get(name, 0)}: "
                "the counters were reset in between"
            )
        if d:
            delta[name] = d
    return delta


def rpc_delta(before: RpcStats, after: RpcStats, own: int = 1) -> Counter[str]:
    """RPCs per message type between two snapshots, less the ``own`` sdiag calls counted
    in between (the earlier snapshot's, by default: an sdiag call is counted once
    answered, so it shows in the next snapshot, not in its own). Raises SdiagError as
    :func:`counts_delta` does, or when fewer REQUEST_STATS_INFO than ``own`` arrived
    (then these are not the snapshots we took in turn)."""
    delta = counts_delta(before.count, after.count)
    if delta[STATS_RPC] < own:
        raise SdiagError(
            f"{delta[STATS_RPC]} {STATS_RPC} between the snapshots, fewer than our {own}"
        )
    delta[STATS_RPC] -= own
    return +delta  # (drops the zero)


def micros_delta(before: RpcStats, after: RpcStats) -> Counter[str]:
    """slurmctld's serving time per message type between two snapshots (microseconds)."""
    return +Counter({n: after.micros.get(n, 0) - before.micros.get(n, 0) for n in after.micros})


_serial = iter(range(1, 10**6))


def start_big(defined: int = 2000, *, name: str | None = None, timeout: float = 90.0):
    """munged and slurmctld with ``defined`` CLOUD nodes (1..100,000); returns once sinfo
    lists them all. On failure everything is stopped (logs stay) and SlurmError says why."""
    if os.geteuid() != 0:
        raise SlurmError("the Slurm test cluster needs root (SlurmUser=root)")
    missing = [b for b in ("munged", "slurmctld", "sinfo", "sdiag") if not shutil.which(b)]
    if missing:
        raise SlurmError(f"{', '.join(missing)} not found; run: bash scripts/setup.sh")
    if not 1 <= defined <= 100_000:
        raise SlurmError(f"defined nodes must be 1..100000, not {defined}")
    name = name or f"b{os.getpid()}-{next(_serial)}"
    d = SLURM_ROOT / name
    if read_record(d):
        raise SlurmError(f"cluster directory {d} is in use")
    t0 = time.monotonic()
    with lock():
        slurm.cleanup_stale()
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        c = BigSlurmCluster(name, d, 0, [], gpus=0, defined=defined)
        c.save_record()
    try:
        slurm.start_control(c)
        c.wait_defined(timeout)
    except BaseException as exc:
        c.stop()
        if isinstance(exc, SlurmError | KeyboardInterrupt):
            raise
        raise SlurmError(f"cluster {name}: start failed: {exc}; logs in {d}") from exc
    c.start_seconds = time.monotonic() - t0
    return c


if __name__ == "__main__":  # pragma: no cover - manual use
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with start_big(n) as big:
        print(f"{big.name}: {n} nodes in {big.start_seconds:.1f}s; SLURM_CONF={big.conf}")
        print(big.run("sinfo", "-s"))
