#!/usr/bin/env python3
"""Where a command's CPU goes, by program: BSD process accounting around one command.

    cpu_profile.py [--top N] [--json] -- COMMAND [ARG ...]
    cpu_profile.py --read FILE [--top N] [--json]

``make cpu-profile ARGS='tests/integration/test_controller_e2e.py -n 2'`` runs pytest so.

The suite is CPU-bound on 2 CPUs: a pytest worker's own CPU figure misses its nodes (their
systemd, sshd, the Ansible modules run on them), the kube-apiserver and every short-lived
``ansible-playbook`` fork. The kernel's process accounting (acct(2)) writes one record per
process that ends, with its command name, parent and CPU time, whoever started it, so the
sum is the command's whole cost. Processes are grouped by command name; those that ran
inside a node (below a ``systemd-nspawn``) are ``node:NAME``.

Accounting is machine-wide: whatever else runs meanwhile is counted too (run it on a quiet
machine). A process still running when the command ends has no record (a session-scoped
API server, say); the machine's CPU over the run is printed beside the sum to show what
is missing. Needs root (acct(2)); one line on stderr and exit 2 otherwise.

Written here rather than taken from the ``acct`` package's ``sa``: ``sa`` sums by command
name only, and which programs ran inside a node is the question (parents are needed).
"""

from __future__ import annotations

import argparse
import bisect
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# struct acct_v3 (include/uapi/linux/acct.h): flag, version, tty, exitcode, uid, gid, pid,
# ppid, btime, etime (float), then 8 comp_t (utime, stime, mem, io, rw, minflt, majflt,
# swaps) and the 16-byte command name: 64 bytes.
_V3 = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100  # comp_t times are in these ticks per second (AHZ of the v3 format)
NODE_PARENT = "systemd-nspawn"


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    cpu: float  # user + system seconds
    start: int  # when it started (seconds since the epoch)


def comp_t(value: int) -> int:
    """A comp_t: a 13-bit mantissa and a base-8 exponent in the top 3 bits."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def records(data: bytes) -> Iterator[Proc]:
    """The v3 records of an accounting file, in the order the processes ended (other
    versions are skipped)."""
    for offset in range(0, len(data) - _V3.size + 1, _V3.size):
        fields = _V3.unpack_from(data, offset)
        if fields[1] != 3:
            continue
        pid, ppid, start = fields[6], fields[7], fields[8]
        utime, stime = comp_t(fields[10]), comp_t(fields[11])
        comm = fields[18].split(b"\0", 1)[0].decode(errors="replace")
        yield Proc(pid, ppid, comm, (utime + stime) / AHZ, start)


def parents(procs: list[Proc]) -> list[int | None]:
    """Each record's parent record (its index), or None when the parent left none.

    Pids are reused in a long run (pid_max is 32768 here), so a parent is not "the record
    with that pid" but the first one after the child's (a parent ends after its children;
    an orphan's parent is whoever adopted it) that started no later than the child did."""
    where: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(procs):
        where[p.pid].append(i)
    out: list[int | None] = []
    for i, p in enumerate(procs):
        later = where.get(p.ppid, [])
        j = bisect.bisect_right(later, i)
        out.append(later[j] if j < len(later) and procs[later[j]].start <= p.start else None)
    return out


def by_program(procs: Iterable[Proc]) -> tuple[Counter[str], Counter[str]]:
    """CPU seconds and process counts per program, ``node:`` before what ran in a node."""
    procs = list(procs)
    parent = parents(procs)
    in_node: list[bool | None] = [None] * len(procs)

    def below_nspawn(i: int) -> bool:
        chain = []
        j = parent[i]
        found = False
        while j is not None:
            if in_node[j] is not None:
                found = bool(in_node[j]) or procs[j].comm == NODE_PARENT
                break
            if procs[j].comm == NODE_PARENT:
                found = True
                break
            chain.append(j)
            j = parent[j]
        for k in chain:  # (each of them is below what was found too)
            in_node[k] = found
        return found

    cpu: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for i, p in enumerate(procs):
        if in_node[i] is None:
            in_node[i] = below_nspawn(i)
        key = f"node:{p.comm}" if in_node[i] else p.comm
        cpu[key] += p.cpu
        count[key] += 1
    return cpu, count


def machine_cpu() -> float:
    """All CPUs' busy seconds since boot (/proc/stat: user..steal, not idle or iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields[:3]) + sum(fields[5:8])  # user nice system, irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def run_accounted(command: list[str], acct_file: Path) -> tuple[int, float]:
    """Run ``command`` with process accounting into ``acct_file``; its exit code and the
    machine's busy CPU seconds meanwhile."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(str(acct_file).encode()) != 0:
        err = ctypes.get_errno()
        raise PermissionError(f"acct({acct_file}): {os.strerror(err)} (needs root)")
    before = machine_cpu()
    # (tests that switch accounting themselves skip when they see this)
    env = {**os.environ, "FLEETMEDIC_CPU_PROFILE": str(acct_file)}
    try:
        rc = subprocess.call(command, env=env)
    finally:
        libc.acct(None)
    return rc, machine_cpu() - before


def table(cpu: Counter[str], count: Counter[str], top: int, machine: float | None) -> str:
    total = sum(cpu.values())
    lines = [f"{'CPU s':>9} {'share':>6} {'procs':>7}  program"]
    for name, seconds in cpu.most_common(top):
        share = 100 * seconds / total if total else 0.0
        lines.append(f"{seconds:9.1f} {share:5.1f}% {count[name]:7d}  {name}")
    lines.append(f"{total:9.1f} {'':6} {sum(count.values()):7d}  all ended processes")
    if machine is not None:
        lines.append(f"{machine:9.1f} {'':6} {'':7}  the machine's busy CPU meanwhile")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="CPU seconds of a command by program, from process accounting.",
        epilog="Example: cpu_profile.py -- .venv/bin/python -m pytest -n 2 tests/integration",
    )
    parser.add_argument("--read", type=Path, help="an accounting file written before")
    parser.add_argument("--keep", type=Path, help="keep the accounting file here")
    parser.add_argument("--top", type=int, default=25, help="programs shown (default 25)")
    parser.add_argument("--json", action="store_true", help="JSON: {program: [cpu, procs]}")
    parser.add_argument("command", nargs="*", help="the command to run (after --)")
    args = parser.parse_args(argv)
    if bool(args.read) == bool(args.command):
        parser.error("give a command after -- or --read FILE, not both")
    machine = None
    rc = 0
    try:
        if args.read:
            data = args.read.read_bytes()
        else:
            with tempfile.TemporaryDirectory() as tmp:
                acct_file = args.keep or Path(tmp) / "pacct"
                acct_file.touch()
                rc, machine = run_accounted(args.command, acct_file)
                data = acct_file.read_bytes()
    except OSError as exc:
        print(f"cpu_profile: {exc}", file=sys.stderr)
        return 2
    cpu, count = by_program(records(data))
    if args.json:
        print(json.dumps({k: [round(v, 2), count[k]] for k, v in cpu.most_common()}))
    else:
        print(table(cpu, count, args.top, machine))
    return rc


if __name__ == "__main__":
    sys.exit(main())
