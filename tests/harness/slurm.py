"""A real Slurm cluster for tests: Debian's slurmctld and slurmd, 22.05 (Debian 12, on this
host) or 24.11 (Debian 13, from its node tree: tests/harness/slurm24.py), with munge.

    with start_cluster(nodes=2) as c:            # or the ``slurm`` fixture
        c = start_cluster(2, version="24.11")    # the same cluster with Slurm 24.11
        c.env                                    # {"SLURM_CONF": ...} for the client tools
        c.run("scontrol", "show", "node", "n1")  # a client tool with that env
        c.nodes()                                # the nodes in sinfo --json's 22.05 fields
        c.wait_saved("fleetmedic: reboot")      # slurmctld's node state file holds it
        c.restart_ctld(kill=True)                # SIGKILL slurmctld, start it again

What runs, all of it the cluster's own (nothing fixed, so two xdist workers and other
helpers' clusters run side by side):

- munged with its own key (1 KiB from os.urandom, as ``mungekey`` makes), socket, pid,
  log and seed files under ``/run/fleetmedic/slurm/<name>/``. munged checks that the
  socket's directory is 0755 and nobody else may write to its parents, which pytest's
  0700 temp dirs would fail: hence /run.
- slurmctld in the host's network namespace on a free port, reached at the host end of
  a private bridge, with its own StateSaveLocation. (Not bound to that address alone:
  ``CommunicationParameters=NoInAddrAny`` applies to slurmd too, and slurmd then bound
  127.0.0.1 in its namespace, where slurmctld's pings never arrive: measured, every node
  went NOT_RESPONDING after a slurmctld restart.)
- one slurmd per node, each in a network namespace of its own with a veth on that
  bridge: node ``n<i>`` is ``192.168.<octet>.<10+i>`` with slurmd on Slurm's default
  port 6818, as on real nodes.

Why a namespace per slurmd rather than several slurmd on one address (a probe here found
that ``slurmd -N <node>`` with a ``Port=`` per node also runs): each slurmd then has its
own address and port space like a real node, all on Slurm's default port; slurmctld
reaches each by its own NodeAddr as in production; a node can be cut off by its link
alone; and nothing leans on running several slurmd per host, which Slurm documents only
for builds configured with ``--enable-multiple-slurmd``. slurmd is entered into the
namespace with ``nsenter --net`` and not ``ip netns exec``: the latter mounts a fresh
/sys for the namespace, without /sys/fs/cgroup, and slurmd 22.05 then fails ("Unable to
initialize cgroup plugin"). The fleet nodes (tests/harness/fleet.py) are the same shape,
so a later harness can run slurmd inside them against this slurmctld.

Names, chosen apart from the fleets' (``fm<octet>...``, 240-254) and the meshes'
(``fmrx...``): subnets ``192.168.224-239.0/24``, bridge ``fmsb<octet>``, netns
``fmsl<octet>-<node>``, host veth ``fmsl<octet>v<i>``. Each cluster is recorded in
``<dir>/cluster.json`` with its owner; :func:`cleanup_stale` (run under a lock before each
start, and by ``python -m tests.harness.slurm cleanup``) removes what clusters of dead
owners left, and Slurm-shaped network objects no live cluster owns.

Each node has ``gpus`` GPUs as Slurm GRES (default 2; ``gres.conf`` with AutoDetect=off
and per-node character devices, see :meth:`SlurmCluster.gres_conf`), so ``sbatch
--gres=gpu:N`` runs and sets CUDA_VISIBLE_DEVICES as on a GPU node.

Slurm's own settings come from what a probe here found (see the shared FACTS notes):
root as SlurmUser, proctrack/linuxproc, task/none, no accounting, ReturnToService=2.

Run ``python -m tests.harness.slurm up|down|status|cleanup`` for a cluster by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness import fleet_net as net
from tests.harness import procs, slurm24
from tests.harness.fleet_sys import (
    kill_and_wait,
    me,
    mounts_under,
    proc_alive,
    proc_start,
    umount_all,
)

SLURM_ROOT = Path(os.environ.get("FLEETMEDIC_SLURM", "/run/fleetmedic/slurm"))
OCTETS = range(224, 240)
SLURMD_PORT = 6818  # Slurm's default; each slurmd has its own namespace
DAEMONS = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "nsenter")


class SlurmError(RuntimeError):
    """The test Slurm cluster could not be built, started or queried. One line."""


def log(msg: str) -> None:
    print(f"[slurm] {msg}", file=sys.stderr, flush=True)


def bridge_name(octet: int) -> str:
    return f"fmsb{octet}"


def netns_name(octet: int, node: str) -> str:
    return f"fmsl{octet}-{node}"


def veth_name(octet: int, index: int) -> str:
    return f"fmsl{octet}v{index}"


JOB_SUMMARY = ("JobState", "Reason", "Restarts", "NodeList", "SubmitTime", "StartTime",
               "LastSchedEval")  # fmt: skip
"""The fields of ``scontrol show job`` that :meth:`SlurmCluster.job_story` puts first."""


def is_ours(name: str) -> bool:
    """A network object of this harness's shape (netns, veth or bridge)."""
    return name.startswith(("fmsl", "fmsb")) and name[4:7].isdigit()


@dataclass
class Proc:
    """One daemon we started: its argv, log, and the Popen while it runs."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = None

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def record(self) -> dict | None:
        if not self.alive or self.popen is None:
            return None
        return {"pid": self.popen.pid, "start": proc_start(self.popen.pid)}


@dataclass
class SlurmCluster:
    """One cluster: munged, slurmctld and ``nodes`` slurmd. See the module docstring."""

    name: str
    dir: Path
    octet: int
    node_names: list[str]
    ctld_port: int = 0
    slurmd_timeout: int = 30
    gpus: int = 2
    owned: bool = True
    daemons: dict[str, Proc] = field(default_factory=dict)
    start_seconds: float | None = None
    extra_conf: str = ""  # slurm.conf lines of a test's own (Prolog=, HealthCheckProgram=)
    return_to_service: int = 2
    version: str = "22.05"  # Slurm's release: 22.05 on the host, 24.11 and 26.05 from trees

    @property
    def root(self) -> slurm24.Root | None:
        """The chroot every process of a tree's release (24.11, 26.05) runs in (None for
        22.05: the host's Slurm)."""
        return slurm24.shared(self.version) if self.version != "22.05" else None

    @property
    def bin_dir(self) -> Path | None:
        """Where this cluster's client tools are, for ``Slurm(bin_dir=...)`` or the front
        of PATH (None: the host's, 22.05)."""
        return self.root.bin_dir if self.root else None

    @property
    def list_command(self) -> str:
        """How fleetmedic reads every node of this release (what its errors name)."""
        return "sinfo --json" if self.version == "22.05" else "show node"

    @property
    def node_command(self) -> str:
        """How fleetmedic reads one node (adapters/slurmread.py, every release; what the
        agent's errors name)."""
        return "sinfo -n"

    def marked_down(self, reason: str) -> str:
        """``reason`` as this release shows it once slurmctld marked the node DOWN (not
        responding): 24.11 appends its own words (measured), 22.05 leaves it."""
        return reason if self.version == "22.05" else f"{reason} : Not responding"

    def exe(self, tool: str, *args: str) -> list[str]:
        """The argv that runs ``tool`` (a daemon or a client) of this cluster's release."""
        return self.root.argv(tool, *args) if self.root else [tool, *args]

    # -- paths and addresses ------------------------------------------------------
    @property
    def host_address(self) -> str:
        return f"192.168.{self.octet}.1"

    def node_address(self, node: str) -> str:
        return f"192.168.{self.octet}.{10 + self.node_names.index(node) + 1}"

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    @property
    def state_dir(self) -> Path:
        return self.dir / "state"

    @property
    def env(self) -> dict[str, str]:
        """What a client tool needs (without SLURM_CONF: "DNS SRV lookup failed")."""
        return {"SLURM_CONF": str(self.conf)}

    def netns(self, node: str) -> str:
        return netns_name(self.octet, node)

    # -- configuration ------------------------------------------------------------
    def slurm_conf(self) -> str:
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={self.node_address(n)} NodeHostname={n} CPUs=2 "
            f"RealMemory=1000{gres} State=UNKNOWN"
            for n in self.node_names
        )
        d = self.dir
        return f"""\
# Written by tests/harness/slurm.py for cluster {self.name}.
ClusterName={self.name}
# slurmctld checks that this host's short name is a SlurmctldHost; the nodes reach it at
# the private bridge's address, on a free port.
SlurmctldHost={socket.gethostname().split(".")[0]}({self.host_address})
SlurmctldPort={self.ctld_port}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={self.state_dir}
SlurmctldPidFile={d}/slurmctld.pid
{self.slurmd_conf()}
# No cgroups here (v1 hybrid without a usable hierarchy for Slurm), no accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
# A node that was DOWN comes back by registering with a valid configuration (2; a test
# may set 0 or 1: set_return_to_service).
ReturnToService={self.return_to_service}
# Quick to notice a slurmd that went away, without false alarms on a loaded CI machine
# (30 s: a node whose slurmd died was DOWN "Not responding" after 52 s here).
SlurmdTimeout={self.slurmd_timeout}
{nodes}
PartitionName=gpu Nodes={",".join(self.node_names)} Default=YES MaxTime=INFINITE State=UP
{self.extra_conf}"""

    def slurmd_conf(self) -> str:
        """slurm.conf's lines for slurmd's own files: here every slurmd runs on this host,
        so each has its spool and pid file under the cluster's directory. (The Slurm
        fleet, whose slurmd run inside the nodes, keeps them on the node and adds its
        RebootProgram: tests/harness/slurmfleet.py.)"""
        d = self.dir
        return f"SlurmdSpoolDir={d}/spool/%n\nSlurmdPidFile={d}/spool/slurmd-%n.pid"

    def gres_conf(self) -> str:
        """GPUs without GPUs: ``File=`` must name character devices (a regular file is "not
        a valid device", a Count without File is dropped and the node goes INVAL), so each
        node gets its own ``mknod c 1 3`` devices (made by :meth:`make_gpu_devices`)."""
        lines = ["# Written by tests/harness/slurm.py: no detection, devices of our own", ""]
        for n in self.node_names if self.gpus else ():
            last = self.gpus - 1
            files = (
                f"{self.dir}/dev/{n}/nvidia[0-{last}]" if last else f"{self.dir}/dev/{n}/nvidia0"
            )
            lines.append(f"NodeName={n} Name=gpu File={files}")
        return "AutoDetect=off\n" + "\n".join(lines) + "\n"

    def make_gpu_devices(self) -> None:
        for n in self.node_names:
            d = self.dir / "dev" / n
            d.mkdir(parents=True, exist_ok=True)
            for i in range(self.gpus):
                if not (d / f"nvidia{i}").exists():
                    os.mknod(d / f"nvidia{i}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))

    # -- lifecycle ------------------------------------------------------------------
    def _spawn(self, key: str, argv: list[str], logname: str) -> None:
        p = Proc(key, argv, self.dir / logname)
        p.popen = spawn(argv, p.log, self.owned)
        self.daemons[key] = p
        self.save_record()

    def start_munged(self) -> None:
        d = self.dir / "munge"
        self._spawn(
            "munged",
            self.exe(
                "munged",
                "--foreground",
                f"--key-file={self.dir / 'mungekey' / 'munge.key'}",
                f"--socket={self.munge_socket}",
                f"--pid-file={d / 'munged.pid'}",
                f"--log-file={d / 'munged.log'}",
                f"--seed-file={d / 'munged.seed'}",
            ),
            "munged.out",
        )
        wait_for(lambda: self.munge_socket.exists(), 20, "munged socket", self.daemons["munged"])

    def start_ctld(self) -> None:
        self._spawn("slurmctld", self.exe("slurmctld", "-D", "-f", str(self.conf)), "slurmctld.log")

    def start_ctld_on_a_free_port(self, tries: int = 3) -> None:
        """Pick a free port, write slurm.conf, start slurmctld and wait until it answers.
        slurmctld listens on every address, so the port is picked free on all of them; a
        port taken between the pick and slurmctld's bind gets another pick."""
        for attempt in range(tries):
            self.ctld_port = procs.free_port("0.0.0.0")
            self.conf.write_text(self.slurm_conf())
            self.start_ctld()
            p = self.daemons["slurmctld"]
            deadline = time.monotonic() + 60
            while p.alive and time.monotonic() < deadline:
                if (
                    subprocess.run(
                        self.exe("scontrol", "ping"),
                        capture_output=True,
                        env={**os.environ, **self.env},
                    ).returncode
                    == 0
                ):
                    return
                time.sleep(0.1)
            in_use = "Address already in use" in p.log.read_text(errors="replace")
            self.stop_proc("slurmctld", kill=True)
            if not (in_use and attempt < tries - 1):
                raise SlurmError(
                    f"slurmctld did not answer: {procs.last_line(p.log, 'error')} (log: {p.log})"
                )

    def start_slurmd(self, node: str) -> None:
        (self.dir / "spool" / node).mkdir(parents=True, exist_ok=True)
        self._spawn(
            f"slurmd-{node}",
            [
                "nsenter",
                f"--net=/run/netns/{self.netns(node)}",
                *self.exe("slurmd", "-D", "-N", node, "-f", str(self.conf)),
            ],
            f"slurmd-{node}.log",
        )

    def set_link(self, node: str, up: bool) -> None:
        """Fault injection: the host end of the node's cable (``ip link set <veth> down``)."""
        veth = veth_name(self.octet, self.node_names.index(node) + 1)
        net.ip("link", "set", veth, "up" if up else "down")

    def stop_proc(self, key: str, *, kill: bool = False) -> None:
        p = self.daemons.get(key)
        if p and p.popen:
            procs.stop(p.popen, timeout=15, sig=signal.SIGKILL if kill else signal.SIGTERM)
        self.save_record()

    def restart_ctld(self, *, kill: bool = True, timeout: float = 90.0) -> float:
        """Stop slurmctld (SIGKILL with ``kill``: a crash) and start it again on the same
        port and state; wait until every node answers. Returns the seconds it took."""
        t0 = time.monotonic()
        self.stop_proc("slurmctld", kill=kill)
        self.start_ctld()
        self.wait_ready(timeout)
        return time.monotonic() - t0

    def set_return_to_service(self, value: int) -> None:
        """slurm.conf's ReturnToService, applied with ``scontrol reconfigure`` (the file is
        rewritten in place: the fleet's nodes bind it)."""
        if value == self.return_to_service:
            return
        self.return_to_service = value
        self.conf.write_text(self.slurm_conf())
        self.run("scontrol", "reconfigure")
        out = self.run("scontrol", "show", "config")
        if not re.search(rf"^ReturnToService\s*=\s*{value}$", out, re.M):
            raise SlurmError(f"ReturnToService={value} not taken by slurmctld")

    @contextlib.contextmanager
    def saves_frozen(self) -> Iterator[None]:
        """slurmctld's state saves fail inside this block: its StateSaveLocation is made
        immutable (``chattr +i``: no file can be created in it, not even by root), so each
        save logs "Can't save state, error creating file ..." and slurmctld goes on serving.
        Every update made meanwhile is lost if slurmctld is killed before the block ends:
        what a crash inside slurmctld's save interval does, held open for as long as a test
        needs it. (Not a read-only bind mount: under the shared /run it would propagate
        into other clusters' node namespaces, and a bind of a directory onto itself does
        not show as a mount point to ``os.path.ismount``.)"""
        subprocess.run(["chattr", "+i", str(self.state_dir)], check=True, capture_output=True)
        try:
            yield
        finally:
            thaw(self.state_dir)

    def stop(self) -> None:
        """Stop every daemon, delete namespaces, veths and the bridge, and the record
        (logs and state stay in the directory for a look after a failure)."""
        thaw(self.state_dir)
        for key in [k for k in self.daemons if k.startswith("slurmd-")]:
            self.stop_proc(key)
        for key in ("slurmctld", "munged"):
            self.stop_proc(key)
        with lock():
            teardown(self._record(), remove_dir=False)
            (self.dir / "cluster.json").unlink(missing_ok=True)

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- records --------------------------------------------------------------------
    def _record(self) -> dict:
        return {
            "name": self.name,
            "dir": str(self.dir),
            "octet": self.octet,
            "nodes": self.node_names,
            "ctld_port": self.ctld_port,
            "owner": me() if self.owned else None,
            "procs": {k: p.record() for k, p in self.daemons.items()},
            "version": self.version,
            "netns": [self.netns(n) for n in self.node_names],
            "links": [veth_name(self.octet, i + 1) for i in range(len(self.node_names))]
            + [bridge_name(self.octet)],
        }

    def save_record(self) -> None:
        """Write the record atomically: it is rewritten outside the lock (a daemon started
        or stopped), and a sweep in another process that read half a record would take
        this live cluster's namespaces for leftovers and kill its slurmd (seen once under
        two xdist workers before this was a rename)."""
        tmp = self.dir / f".cluster.json.{os.getpid()}"
        tmp.write_text(json.dumps(self._record(), indent=1))
        os.replace(tmp, self.dir / "cluster.json")

    # -- client side ----------------------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        """A Slurm client tool with this cluster's SLURM_CONF; its stdout."""
        p = subprocess.run(
            self.exe(*argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **self.env},
        )
        if check and p.returncode:
            raise SlurmError(f"{' '.join(argv)}: rc {p.returncode}: {net.one_line(p.stderr)}")
        return p.stdout

    def job_story(self, job: str, lines: int = 12) -> str:
        """What a test prints when a job did not run in time, most telling first (CI keeps
        a failure's first lines): the job's state in one line (``JOB_SUMMARY`` fields of
        ``scontrol show job``), the nodes' states, the last lines of every slurmd log (a
        prolog's or a launch's error is there, not in the job), slurmctld's, and the job
        whole."""
        whole = self.run("scontrol", "show", "job", job, check=False).strip()
        fields = dict(m.groups() for m in re.finditer(r"\b([A-Za-z]+)=(\S*)", whole))
        out = [f"job {job}: " + (" ".join(f"{k}={fields[k]}" for k in JOB_SUMMARY if k in fields)
                                or "unknown to slurmctld")]  # fmt: skip
        try:
            out += [f"{n}: {v['state']}+{'+'.join(v['state_flags'])} {v['reason']!r}"
                    for n, v in self.nodes().items()]  # fmt: skip
        except (SlurmError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
            out.append(f"nodes: {net.one_line(str(exc))}")
        daemons = sorted(self.daemons.items(), key=lambda kv: kv[0] == "slurmctld")
        for key, p in daemons:
            if key == "munged":
                continue
            try:
                tail = p.log.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                tail = ["(no log)"]
            out += [f"-- {p.log}", *tail]
        return "\n".join([*out, "-- scontrol show job", whole])

    def nodes(self) -> dict[str, dict[str, Any]]:
        """The nodes by name, in 22.05's ``sinfo --json`` fields (``state``,
        ``state_flags``, ``reason``, ``boot_time``, ``extra``, ...) on either release: 24.11's
        ``scontrol show node --json`` normalized by the harness (slurm24.normalize)."""
        if self.root:
            return slurm24.nodes(self.run("scontrol", "show", "node", "--json"))
        return {n["name"]: n for n in json.loads(self.run("sinfo", "--json"))["nodes"]}

    def wait_ready(self, timeout: float = 90.0) -> float:
        """Wait until slurmctld answers and every slurmd has registered (no node
        UNKNOWN, DOWN or NOT_RESPONDING). Returns the seconds waited."""
        t0 = time.monotonic()
        last = "no answer"
        while True:
            for key, p in self.daemons.items():
                if not p.alive:
                    raise SlurmError(
                        f"{key} exited with code {p.popen.poll() if p.popen else '?'}: "
                        f"{procs.last_line(p.log, 'error')} (log: {p.log})"
                    )
            try:
                got = self.nodes()
                bad = {
                    n: f"{v['state']}+{'+'.join(v['state_flags'])}"
                    for n, v in got.items()
                    if v["state"] in ("unknown", "down") or "NOT_RESPONDING" in v["state_flags"]
                }
                if not bad and set(got) == set(self.node_names):
                    return time.monotonic() - t0
                last = f"not ready: {bad}"
            except (SlurmError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
                last = net.one_line(str(exc))
            if time.monotonic() - t0 > timeout:
                raise SlurmError(
                    f"cluster {self.name} not ready after {timeout:.0f}s ({last}); "
                    f"logs in {self.dir}"
                )
            time.sleep(0.2)

    def reset_nodes(self) -> None:
        """Put every node back as a test found it: resumed, no reason, no Comment/Extra."""
        for name, n in self.nodes().items():
            if "DRAIN" in n["state_flags"] or n["state"] == "down":
                self.run("scontrol", "update", f"nodename={name}", "state=resume")
            if n["extra"] or n["comment"]:
                self.run("scontrol", "update", f"nodename={name}", "extra=", "comment=")

    def save_barrier(self, timeout: float = 30.0) -> float:
        """Wait until slurmctld has saved everything it answered before this call: it
        saves its whole node table at once, so once a fresh mark is on disk so is every
        update before it. The mark (a Comment on the first node) is taken off again."""
        node = next(iter(self.nodes()))
        mark = f"save-barrier-{time.time_ns()}"
        self.run("scontrol", "update", f"nodename={node}", f"comment={mark}")
        try:
            return self.wait_saved(mark, timeout=timeout)
        finally:
            self.run("scontrol", "update", f"nodename={node}", "comment=")

    def wait_saved(self, *texts: str, timeout: float = 30.0) -> float:
        """Wait until slurmctld's node state file holds every one of ``texts`` (a reason, a
        Comment or Extra value written just before: strings are stored there as they are).
        slurmctld acknowledges an update before it saves it, and a save that follows
        another within a few seconds is put off (measured here: up to about 5 s); a crash
        in between loses the update. Returns the seconds waited.

        Only a text no earlier update wrote waits for anything: 24.11 keeps a resumed
        node's last reason in node_state, so after an earlier drain with the same reason
        this returns at once, before the new update is saved (issue 38). Otherwise use a
        fresh text or :meth:`save_barrier`."""
        f = self.state_dir / "node_state"
        want = [t.encode() for t in texts]
        t0 = time.monotonic()
        while True:
            try:
                data = f.read_bytes()
            except FileNotFoundError:
                data = b""
            if all(w in data for w in want):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise SlurmError(f"{f} does not hold {texts} after {timeout:.0f}s")
            time.sleep(0.05)


# ---------------------------------------------------------------------------------------
def spawn(argv: Sequence[str], logf: Path, owned: bool) -> subprocess.Popen:
    """A daemon in its own session, output to ``logf``. Owned (a test's) daemons die with
    the process that started them; a cluster brought ``up`` by hand stays until ``down``."""
    if owned:
        return procs.spawn(argv, logf)
    with open(logf, "ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(ok: Any, timeout: float, what: str, proc: Proc) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if not proc.alive:
            raise SlurmError(f"{what}: {proc.name} exited: {procs.last_line(proc.log)}")
        if time.monotonic() > deadline:
            raise SlurmError(f"{what}: not there after {timeout:.0f}s (log: {proc.log})")
        time.sleep(0.05)


def lock():
    return procs.exclusive(SLURM_ROOT, "slurm.lock")


def read_record(d: Path) -> dict | None:
    try:
        return json.loads((d / "cluster.json").read_text())
    except (OSError, ValueError):
        return None


def thaw(state_dir: Path) -> None:
    """Undo :meth:`SlurmCluster.saves_frozen` (nothing to undo is fine)."""
    if state_dir.is_dir():
        subprocess.run(["chattr", "-i", str(state_dir)], check=False, capture_output=True)


def teardown(rec: dict, remove_dir: bool) -> None:
    """Kill the cluster's recorded daemons and whatever runs in its namespaces; delete the
    namespaces, veths and bridge."""
    thaw(Path(rec["dir"]) / "state")
    pids = [p["pid"] for p in (rec.get("procs") or {}).values() if p and proc_alive(**p)]
    for ns in rec.get("netns", []):
        pids += net.netns_pids(ns)
    kill_and_wait(pids)
    for ns in rec.get("netns", []):
        net.delete_netns(ns)
    for link in rec.get("links", []):
        net.delete_link(link)
    if remove_dir:
        remove(Path(rec["dir"]))


def remove(d: Path) -> None:
    """Remove a cluster's directory, never through a mount (everything under ``d`` is
    unmounted first; SlurmError, nothing removed, if something stays)."""
    umount_all(d)
    left = mounts_under(d)
    if left:
        raise SlurmError(f"not removing {d}: still mounted: {', '.join(left[:3])}")
    shutil.rmtree(d, ignore_errors=True)


def live(rec: dict) -> bool:
    """Owned by a running process, or brought up by hand (no owner) with slurmctld alive."""
    owner = rec.get("owner")
    if owner:
        return proc_alive(owner["pid"], owner["start"])
    ctld = (rec.get("procs") or {}).get("slurmctld")
    return bool(ctld) and proc_alive(ctld["pid"], ctld["start"])


def cleanup_stale() -> list[str]:
    """Tear down clusters that are not :func:`live`, and Slurm-shaped netns and links no
    live cluster owns. Call under :func:`lock`. Returns what was removed."""
    removed: list[str] = []
    keep_ns: set[str] = set()
    keep_links: set[str] = set()
    unreadable = False
    if SLURM_ROOT.exists():
        for d in sorted(p for p in SLURM_ROOT.iterdir() if p.is_dir()):
            rec = read_record(d)
            if rec is None and (d / "cluster.json").exists():
                if time.time() - d.stat().st_mtime > 3600:
                    remove(d)  # written whole or never, so stale
                else:
                    unreadable = True  # whose names it holds is unknown: sweep no orphans
            elif rec and live(rec):
                keep_ns.update(rec["netns"])
                keep_links.update(rec["links"])
            elif rec:
                teardown(rec, remove_dir=True)
                removed.append(f"cluster {d.name}")
            elif time.time() - d.stat().st_mtime > 3600:
                remove(d)  # a stopped cluster's logs, after an hour
    if unreadable:
        log("a cluster record is unreadable: orphan namespaces and links left for later")
        return removed
    for ns in net.list_netns():
        if is_ours(ns) and ns not in keep_ns:
            kill_and_wait(net.netns_pids(ns))
            net.delete_netns(ns)
            removed.append(f"netns {ns}")
    for link in net.list_links():
        if is_ours(link) and link not in keep_links:
            net.delete_link(link)
            removed.append(f"link {link}")
    if removed:
        log(f"cleaned up leftovers: {', '.join(removed)}")
    return removed


def free_octet() -> int:
    """A subnet no bridge or address on this machine uses. Call under :func:`lock`."""
    addrs = net.ip("-o", "addr", "show", check=False).stdout
    links = set(net.list_links())
    for o in OCTETS:
        if bridge_name(o) not in links and f" 192.168.{o}." not in addrs:
            return o
    raise SlurmError("no free Slurm test subnet in 192.168.224-239.0/24 (too many clusters up?)")


def plumb(c: SlurmCluster) -> None:
    br = bridge_name(c.octet)
    net.ip("link", "add", br, "type", "bridge")
    net.ip("addr", "add", f"{c.host_address}/24", "dev", br)
    net.ip("link", "set", br, "up")
    for i, node in enumerate(c.node_names, start=1):
        ns, veth = c.netns(node), veth_name(c.octet, i)
        net.ip("netns", "add", ns)
        net.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        net.ip("link", "set", veth, "master", br, "up")
        batch = f"link set lo up\naddr add {c.node_address(node)}/24 dev eth0\nlink set eth0 up\n"
        p = subprocess.run(
            ["ip", "-n", ns, "-batch", "-"], input=batch, capture_output=True, text=True
        )
        if p.returncode:
            raise SlurmError(f"ip -n {ns} -batch: {net.one_line(p.stderr)}")


def start_control(c: SlurmCluster) -> None:
    """The cluster's files (munge key, gres.conf, GPU devices) and its control side:
    munged, then slurmctld on a free port (slurm.conf written). The slurmd come after."""
    d = c.dir
    for sub, mode in (("mungekey", 0o700), ("munge", 0o755), ("state", 0o700)):
        (d / sub).mkdir(mode=mode)
    for p in (SLURM_ROOT, d):
        p.chmod(0o755)  # munged refuses a socket under a directory others may write
    key = d / "mungekey" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    (d / "gres.conf").write_text(c.gres_conf())
    c.make_gpu_devices()
    c.start_munged()
    c.start_ctld_on_a_free_port()


_serial = iter(range(1, 10**6))


def start_cluster(
    nodes: int = 2,
    *,
    name: str | None = None,
    owned: bool = True,
    timeout: float = 90.0,
    slurmd_timeout: int = 30,
    gpus: int = 2,
    extra_conf: str = "",
    version: str = "22.05",
) -> SlurmCluster:
    """Start munged, slurmctld and ``nodes`` slurmd (``n1``..) of Slurm ``version``
    (slurm24.VERSIONS); wait until every node is
    up, each with ``gpus`` GPU GRES (device files of our own). ``slurmd_timeout`` is
    Slurm's SlurmdTimeout (a test that waits for a node to be noticed gone may lower it).
    ``extra_conf``: lines appended to slurm.conf (a test's Prolog, HealthCheckProgram).
    On failure everything is torn down (logs stay) and SlurmError says where to look."""
    if os.geteuid() != 0:
        raise SlurmError("the Slurm test cluster needs root (network namespaces)")
    if version not in slurm24.VERSIONS:
        raise SlurmError(f"Slurm {version}: the test clusters run {', '.join(slurm24.VERSIONS)}")
    needed = DAEMONS if version == "22.05" else ("nsenter", "chroot")
    missing = [b for b in needed if not shutil.which(b)]
    if missing:
        raise SlurmError(f"{', '.join(missing)} not found; run: bash scripts/setup.sh")
    if not 1 <= nodes <= 200:
        raise SlurmError(f"nodes must be 1..200, not {nodes}")
    name = name or f"s{os.getpid()}-{next(_serial)}"
    d = SLURM_ROOT / name
    if read_record(d):
        raise SlurmError(f"cluster directory {d} is in use (run: down --name {name})")
    t0 = time.monotonic()
    with lock():
        cleanup_stale()
        remove(d)
        d.mkdir(parents=True)
        c = SlurmCluster(name, d, free_octet(), [f"n{i}" for i in range(1, nodes + 1)])
        c.version = version
        c.owned = owned
        c.slurmd_timeout = slurmd_timeout
        c.gpus = gpus
        c.extra_conf = extra_conf
        c.save_record()  # before plumbing: a crash from here on is swept as stale
        try:
            plumb(c)
        except BaseException:
            teardown(c._record(), remove_dir=False)
            raise
    try:
        start_control(c)
        for node in c.node_names:
            c.start_slurmd(node)
        c.wait_ready(timeout)
    except BaseException as exc:
        c.stop()
        if isinstance(exc, SlurmError | KeyboardInterrupt):
            raise
        raise SlurmError(
            f"cluster {name}: start failed: {net.one_line(str(exc))}; logs in {d}"
        ) from exc
    c.start_seconds = time.monotonic() - t0
    return c


# ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:  # pragma: no cover - manual use
    ap = argparse.ArgumentParser(prog="python -m tests.harness.slurm")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="a cluster that stays up until `down`")
    up.add_argument("-n", "--nodes", type=int, default=3)
    up.add_argument("--name", default="dev")
    up.add_argument("--slurm", default="22.05", choices=slurm24.VERSIONS, help="Slurm release")
    down = sub.add_parser("down", help="stop it and remove everything (logs too)")
    down.add_argument("--name", default="dev")
    sub.add_parser("status")
    sub.add_parser("cleanup", help="remove what crashed runs left")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "up":
            c = start_cluster(a.nodes, name=a.name, owned=False, version=a.slurm)
            print(f"cluster {c.name} up in {c.start_seconds:.1f}s: export SLURM_CONF={c.conf}")
        elif a.cmd == "down":
            with lock():
                rec = read_record(SLURM_ROOT / a.name)
                if not rec:
                    print(f"cluster {a.name} is not up", file=sys.stderr)
                    return 0
                teardown(rec, remove_dir=True)
            print(f"cluster {a.name} down")
        elif a.cmd == "status":
            recs = [r for d in sorted(SLURM_ROOT.glob("*")) if (r := read_record(d))]
            for r in recs:
                print(
                    f"{r['name']}: Slurm {r.get('version', '22.05')}, "
                    f"{'live' if live(r) else 'DEAD'}, 192.168.{r['octet']}.0/24, "
                    f"nodes {', '.join(r['nodes'])}; SLURM_CONF={r['dir']}/slurm.conf"
                )
            if not recs:
                print("no Slurm clusters")
        else:
            with lock():
                removed = cleanup_stale()
                recs = [r for d in sorted(SLURM_ROOT.glob("*")) if (r := read_record(d))]
                if not any(r.get("version", "22.05") != "22.05" and live(r) for r in recs):
                    removed += slurm24.unmount_all_roots()  # no 24.11 cluster lives
                print("removed: " + (", ".join(removed) or "nothing"))
    except SlurmError as exc:
        print(f"slurm: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
