"""A Slurm fleet: test fleet nodes that are Slurm's compute nodes too.

    with start_slurm_fleet(3) as sf:             # or the ``slurm_fleet`` fixture
        sf.fleet                                 # the Fleet: sshd, inventory, real reboots
        sf.slurm.run("sbatch", ...)              # the SlurmCluster: client tools, sinfo
        sf.boot_time("node-2")                   # sinfo's boot_time of the node
        sf.wait_rebooted("node-2", after=t)      # slurmd back with a boot time after t

Each node is a node of the nspawn fleet (tests/harness/fleet.py): systemd, sshd, its own
address on the fleet's bridge, and a reboot that ``ansible.builtin.reboot`` sees. It
also runs Debian's slurmd from its own systemd unit, registered with one slurmctld
on the host (tests/harness/slurm.py's munged and slurmctld, on the fleet bridge's host
address). With ``version="24.11"`` the nodes boot from the Debian 13 tree (systemd 257,
sshd, Python 3.13 with fleetmedic's venv, slurmd 24.11: scripts/setup.d/24-nodetree-
debian.sh; ``"26.05"``: Debian 14's) and munged and slurmctld run chrooted in it
(tests/harness/slurm24.py). The
Slurm node names are the fleet's (``node-1``..), so one name reaches a
node by SSH and in Slurm, as on a real cluster.

What makes it work:

- **slurmd in the node.** The nodes boot from the node tree with one more overlay layer
  holding ``slurmd`` and ``slurm-client`` (scripts/setup.d/22-nodetree-slurm.sh, built
  on first use). The plain fleet's tree is unchanged. Debian's ``slurmd.service`` starts
  at boot because the cluster's ``slurm.conf`` and ``gres.conf`` are bound read-only
  at ``/etc/slurm``.
- **munge.** The node uses the cluster's munged: its socket directory is bound in at the
  same path, which ``AuthInfo=socket=`` names. The node's own munge.service is masked.
  That is one departure from a real cluster, where each node runs munged with the shared
  key. It keeps a single key and a single daemon.
- **GPUs.** Each node has ``gpus`` GRES GPUs, device files of its own bound in at the
  path gres.conf names, as in the bare Slurm harness.
- **A new boot time at every boot.** slurmctld decides that a node rebooted from the
  boot time slurmd reports (now minus the uptime). An nspawn node would report the
  host's boot time at every boot, and a reboot through ``scontrol reboot`` would then
  wait in REBOOT_ISSUED until ResumeTimeout (the trap in the shared FACTS notes). So each
  node boots in a time namespace whose CLOCK_BOOTTIME starts at that boot
  (``NodeSetup.fresh_boottime``). Its uptime starts near 0 at every boot, and only a
  real reboot changes its boot time (restarting slurmd does not).
- **Slurm's reboot.** ``RebootProgram=/usr/sbin/reboot``. slurmd runs it inside the node,
  so ``scontrol reboot`` reboots the node through the same supervisor as ``systemctl
  reboot``. ResumeTimeout is generous, because a loaded 2-CPU CI machine can be slow to
  boot a node.
- **slurmd's own files** (spool, pid file, log) are on the node, in Debian's places:
  ``/var/lib/slurm/slurmd``, ``/run/slurmd.pid``, ``/var/log/slurm/slurmd.log``. The spool
  and the log stay across reboots, as on a disk. From the host the log is
  ``<node dir>/upper/var/log/slurm/slurmd.log``.

The fleet owns the network (bridge, namespaces, veths). The cluster's record under
``/run/fleetmedic/slurm/<fleet name>`` names no network object, so the Slurm harness's
sweep never touches the fleet's. Both halves die with the test process (the fleet's
supervisor and the daemons' PDEATHSIG). A Slurm fleet brought ``up`` by hand lives until
``down``: ``python -m tests.harness.slurmfleet up|down|status``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness import fleet as fl
from tests.harness import slurm as sl
from tests.harness import slurm24
from tests.harness.fleet import Fleet, FleetError, Node, NodeSetup
from tests.harness.slurm import SlurmCluster, SlurmError

LAYER_SCRIPT = fl.ROOT / "scripts" / "setup.d" / "22-nodetree-slurm.sh"
REBOOT_PROGRAM = "/usr/sbin/reboot"
# slurmctld's boot time of a node is its own clock minus the node's uptime, both whole
# seconds (the uptime rounded up), so it moves by a second when slurmd merely registers
# again (measured: a slurmd restart, 1795736569 then 1795736568). A reboot moves it by
# fleet_supervisor.FRESH_BOOT_GAP (3 s) or more.
BOOT_TIME_JITTER = 1
SLURMD_LOG = "/var/log/slurm/slurmd.log"
SEEN_SHOWN = 6  # the last states a failed wait names

__all__ = [
    "BOOT_TIME_JITTER",
    "FleetCluster",
    "SlurmFleet",
    "SlurmFleetError",
    "new_boot",
    "start_slurm_fleet",
]


def new_boot(info: dict[str, Any], before: int) -> bool:
    """sinfo's node ``info`` has a boot time of a later boot than ``before``."""
    return int(info["boot_time"]) > before + BOOT_TIME_JITTER


class SlurmFleetError(RuntimeError):
    """The Slurm fleet could not be started or driven. The message is one line."""


@dataclass
class FleetCluster(SlurmCluster):
    """The Slurm side of a Slurm fleet. munged and slurmctld run on the host, as in
    :class:`SlurmCluster`. The slurmd are the fleet nodes' own, and the network is the
    fleet's."""

    fleet: Fleet | None = field(default=None, repr=False)
    resume_timeout: int = 300

    def _fleet(self) -> Fleet:
        assert self.fleet is not None, "FleetCluster without its fleet"
        return self.fleet

    @property
    def host_address(self) -> str:
        return self._fleet().host_address

    def node_address(self, node: str) -> str:
        return self._fleet().node(node).address

    def slurmd_conf(self) -> str:
        # ResumeTimeout: how long slurmctld waits for a node it rebooted to come back
        # before it marks it DOWN "reboot timed out". A node boots in seconds here, but a
        # loaded CI machine has kept one over 30 s (fleet.start_fleet's boot_timeout).
        return (
            "SlurmdSpoolDir=/var/lib/slurm/slurmd\n"
            "SlurmdPidFile=/run/slurmd.pid\n"
            f"SlurmdLogFile={SLURMD_LOG}\n"
            f"RebootProgram={REBOOT_PROGRAM}\n"
            f"ResumeTimeout={self.resume_timeout}"
        )

    def node_binds(self, node: str) -> list[str]:
        """The nspawn arguments that make ``node`` a node of this cluster."""
        d = self.dir
        binds = [
            f"--bind-ro={self.conf}:/etc/slurm/slurm.conf",
            f"--bind-ro={d / 'gres.conf'}:/etc/slurm/gres.conf",
            f"--bind-ro={self.munge_socket.parent}",
            f"--bind-ro={d / 'dev' / node}",
        ]
        if slurm24.release(self.version).unified_cgroup:
            binds.append(f"--bind-ro={d / 'cgroup.conf'}:/etc/slurm/cgroup.conf")
        return binds

    def _record(self) -> dict:
        # The network is the fleet's: the Slurm harness must neither sweep nor delete it.
        return {**super()._record(), "netns": [], "links": [], "fleet": self._fleet().name}

    def start_slurmd(self, node: str) -> None:
        self._on_node(node, "systemctl start slurmd")

    def stop_slurmd(self, node: str) -> None:
        """Stop slurmd on the node (``systemctl stop``): the node stays up."""
        self._on_node(node, "systemctl stop slurmd")

    def _on_node(self, node: str, command: str) -> None:
        # A node just back from a reboot: slurmd may register before sshd listens (seen
        # at load 10: "reboot complete", then ssh refused), so wait for sshd's banner first
        n = self._fleet().node(node)
        n.wait_ssh(60)
        n.ssh(command)

    def set_link(self, node: str, up: bool) -> None:
        n = self._fleet().node(node)
        if up:
            n.link_up()
        else:
            n.link_down()


@dataclass
class SlurmFleet:
    """A fleet and its Slurm cluster. ``fleet`` drives the nodes, ``slurm`` drives Slurm."""

    fleet: Fleet
    slurm: FleetCluster
    start_seconds: float = 0.0

    @property
    def name(self) -> str:
        return self.fleet.name

    def node(self, key: int | str) -> Node:
        return self.fleet.node(key)

    def __enter__(self) -> SlurmFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def sinfo(self, node: str) -> dict[str, Any]:
        """sinfo's JSON for one node (state, state_flags, reason, boot_time, ...)."""
        try:
            return self.slurm.nodes()[node]
        except KeyError:
            raise SlurmFleetError(f"slurmctld has no node {node!r}") from None

    def boot_time(self, node: str) -> int:
        return int(self.sinfo(node)["boot_time"])

    def slurmd_log(self, node: str) -> str:
        """The node's slurmd log, read from the host (it survives the node's reboots)."""
        path = self.node(node).dir / "upper" / SLURMD_LOG.lstrip("/")
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_node(
        self, node: str, ok: Callable[[dict[str, Any]], bool], what: str, timeout: float = 180
    ) -> float:
        """Wait until ``ok(sinfo's node)``; returns the seconds waited. One-line error with
        what the node went through meanwhile: each state it showed, from the second it was
        first seen (a flake seen once in CI is otherwise a name and no clue). A loaded CI
        machine: deadlines well above the seconds a node takes here."""
        t0 = time.monotonic()
        seen: list[tuple[float, Any]] = []
        while True:
            try:
                n = self.sinfo(node)
                if ok(n):
                    return time.monotonic() - t0
                now: Any = {k: n.get(k) for k in ("state", "state_flags", "reason", "boot_time")}
            except (SlurmError, SlurmFleetError, subprocess.TimeoutExpired, ValueError) as exc:
                now = fl.net.one_line(str(exc))
            if not seen or seen[-1][1] != now:
                seen.append((time.monotonic() - t0, now))
            if time.monotonic() - t0 > timeout:
                went = "; ".join(f"+{t:.0f}s {state}" for t, state in seen[-SEEN_SHOWN:])
                raise SlurmFleetError(
                    f"{node}: not {what} after {timeout:.0f} s (seen: {went}); "
                    f"console {self.node(node).console_log}"
                )
            time.sleep(0.2)

    def wait_rebooted(self, node: str, after: int, timeout: float = 180) -> float:
        """Wait until slurmd on ``node`` has registered with the boot time of a later boot
        than the one whose boot time was ``after`` (:func:`new_boot`), and slurmctld hears
        it (not DOWN, not NOT_RESPONDING). Returns the seconds waited. Not for a reboot
        through Slurm with ``nextstate=down``: that node stays DOWN until slurmctld next
        hears slurmd, up to 200 s here (test_slurm_steps.py says why)."""
        return self.wait_node(
            node,
            lambda n: (
                new_boot(n, after)
                and n["state"] not in ("down", "unknown")
                and "NOT_RESPONDING" not in n["state_flags"]
            ),
            f"back with a boot time after {after}",
            timeout,
        )

    def slurm_inventory(self, directory: Path) -> Path:
        """A ``fleetmedic.fleet.slurm_nodes`` inventory source for this cluster in
        ``directory``, with the fleet's SSH settings (key, known_hosts, ServerAlive) as
        group_vars next to it, as an operator's would be. Returns the source's path."""
        fleet_vars = yaml.safe_load(self.fleet.inventory.read_text())["all"]["vars"]
        (directory / "group_vars").mkdir(parents=True, exist_ok=True)
        (directory / "group_vars" / "all.yml").write_text(yaml.safe_dump(fleet_vars))
        src = directory / "fleet.slurm_nodes.yml"
        src.write_text(
            yaml.safe_dump(
                {"plugin": "fleetmedic.fleet.slurm_nodes", "slurm_conf": str(self.slurm.conf)}
            )
        )
        return src

    def reset(self, timeout: float = 180) -> None:
        """Put the fleet back as a test found it: faults undone and sshd answering, jobs
        cancelled, reboots asked of Slurm cancelled or finished, every node resumed
        without a reason, Comment or Extra, and idle."""
        self.fleet.reset_faults(timeout)
        self.slurm.run("scancel", "--user=root", check=False)
        for name, n in self.slurm.nodes().items():
            if "REBOOT_REQUESTED" in n["state_flags"]:
                self.slurm.run("scontrol", "cancel_reboot", name, check=False)
        for name in self.slurm.node_names:
            self.wait_node(name, lambda n: "REBOOT_ISSUED" not in n["state_flags"], "rebooted")
        self.slurm.reset_nodes()
        for name in self.slurm.node_names:
            self.wait_node(
                name, lambda n: n["state"] == "idle" and not n["state_flags"], "idle", timeout
            )

    def down(self) -> None:
        """Stop the nodes, then the cluster's daemons; remove everything of both."""
        errors = []
        try:
            self.fleet.down()
        except FleetError as exc:
            errors.append(str(exc))
        self.slurm.stop()
        if errors:
            raise SlurmFleetError("; ".join(errors))


def slurm_lowerdir(version: str = "22.05") -> str:
    """The node tree with the Slurm layer on top, built first if missing (once, about 20 s
    over a built tree; concurrent callers wait on the script's lock). 24.11, 26.05: their
    Debian trees'."""
    if version != "22.05":
        try:
            return slurm24.tree_lowerdir(version)
        except slurm24.Slurm24Error as exc:
            raise SlurmFleetError(str(exc)) from None
    cmd = ["bash", str(LAYER_SCRIPT)]
    p = subprocess.run([*cmd, "--print"], capture_output=True, text=True)
    if p.returncode != 0:
        sl.log("Slurm node layer not built yet; building it now (once)")
        b = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if b.returncode != 0:
            raise SlurmFleetError(
                f"building the Slurm node layer failed: {fl.net.one_line(b.stderr)[-400:]}"
            )
        p = subprocess.run([*cmd, "--print"], capture_output=True, text=True)
        if p.returncode != 0:
            raise SlurmFleetError((p.stderr.strip().splitlines() or ["layer not built"])[-1])
    return p.stdout.strip()


def _start_control(
    fleet: Fleet,
    *,
    owned: bool,
    gpus: int,
    slurmd_timeout: int,
    resume_timeout: int,
    extra_conf: str,
    version: str,
) -> FleetCluster:
    """munged and slurmctld for ``fleet``'s nodes (run from start_fleet's prepare hook:
    the fleet's addresses exist, its nodes have not booted yet)."""
    d = sl.SLURM_ROOT / fleet.name
    with sl.lock():
        sl.cleanup_stale()
        sl.remove(d)
        d.mkdir(parents=True)
        c = FleetCluster(
            fleet.name,
            d,
            fleet.octet,
            [n.name for n in fleet],
            slurmd_timeout=slurmd_timeout,
            gpus=gpus,
            owned=owned,
            fleet=fleet,
            resume_timeout=resume_timeout,
        )
        c.extra_conf = extra_conf
        c.version = version
        c.save_record()
        if slurm24.release(version).unified_cgroup:
            # In a node with nspawn's cgroup v2 hierarchy, its processes still show the
            # host's v1 ones in /proc/self/cgroup: slurmd 26.05's autodetected cgroup/v2
            # then stops ("fatal: Hybrid mode is not supported"). The nodes use no
            # cgroups (proctrack/linuxproc, task/none: tests/harness/slurm.py).
            (d / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    try:
        sl.start_control(c)
    except BaseException:
        c.stop()
        raise
    return c


_serial = iter(range(1, 10**6))


def start_slurm_fleet(
    nodes: int = 3,
    name: str | None = None,
    *,
    owned: bool = True,
    gpus: int = 2,
    slurmd_timeout: int = 30,
    resume_timeout: int = 300,
    timeout: float = 120.0,
    extra_conf: str = "",
    version: str = "22.05",
) -> SlurmFleet:
    """Boot ``nodes`` fleet nodes running slurmd against a new slurmctld; wait until every
    node is up in sshd and idle in Slurm. ``slurmd_timeout`` is Slurm's SlurmdTimeout,
    ``resume_timeout`` its ResumeTimeout (how long a reboot it issued may take).
    ``extra_conf``: lines appended to slurm.conf (a Prolog or HealthCheckProgram, which
    then runs inside the nodes, as on a real cluster). ``version``: Slurm's release
    (slurm24.VERSIONS). On failure both halves are torn down (logs stay) and the error
    says where to look."""
    if not shutil.which("unshare"):
        raise SlurmFleetError("unshare not found (util-linux); run: bash scripts/setup.sh")
    if version not in slurm24.VERSIONS:
        raise SlurmFleetError(f"Slurm {version}: the fleets run {', '.join(slurm24.VERSIONS)}")
    missing = [b for b in sl.DAEMONS if version == "22.05" and not shutil.which(b)]
    if missing:
        raise SlurmFleetError(f"{', '.join(missing)} not found; run: bash scripts/setup.sh")
    t0 = time.monotonic()
    lower = slurm_lowerdir(version)
    holder: list[FleetCluster] = []

    def prepare(fleet: Fleet, node: Node) -> NodeSetup:
        if not holder:
            holder.append(
                _start_control(
                    fleet,
                    owned=owned,
                    gpus=gpus,
                    slurmd_timeout=slurmd_timeout,
                    resume_timeout=resume_timeout,
                    extra_conf=extra_conf,
                    version=version,
                )
            )
        return NodeSetup(
            nspawn_args=holder[0].node_binds(node.name),
            env=dict(slurm24.NSPAWN_UNIFIED) if slurm24.release(version).unified_cgroup else {},
            fresh_boottime=True,
        )

    name = name or f"sfleet-{os.getpid()}-{next(_serial)}"
    try:
        fleet = fl.start_fleet(
            nodes, name, owned=owned, prepare=prepare, lower=lower, boot_timeout=timeout
        )
    except BaseException as exc:
        if holder:
            holder[0].stop()
        if isinstance(exc, FleetError | SlurmError):
            raise SlurmFleetError(str(exc)) from exc
        raise
    sf = SlurmFleet(fleet, holder[0])
    try:
        sf.slurm.wait_ready(timeout)
    except BaseException as exc:
        logs = ", ".join(str(n.dir / "upper" / SLURMD_LOG.lstrip("/")) for n in fleet)
        try:
            sf.down()
        except SlurmFleetError as down_exc:
            sl.log(f"teardown after a failed start: {down_exc}")
        if isinstance(exc, SlurmError):
            raise SlurmFleetError(f"{exc}; slurmd logs: {logs}") from exc
        raise
    sf.start_seconds = time.monotonic() - t0
    sl.log(f"Slurm fleet {name}: {nodes} nodes idle in {sf.start_seconds:.1f} s")
    return sf


def attach(name: str) -> SlurmFleet:
    """A running Slurm fleet brought ``up`` by hand (its fleet and cluster records)."""
    fleet = fl.attach(name)
    rec = sl.read_record(sl.SLURM_ROOT / name)
    if not rec:
        raise SlurmFleetError(f"fleet {name} has no Slurm cluster record")
    c = FleetCluster(
        name, sl.SLURM_ROOT / name, rec["octet"], rec["nodes"], rec["ctld_port"], fleet=fleet
    )
    c.version = rec.get("version") or "22.05"
    c.owned = False
    return SlurmFleet(fleet, c)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - manual use
    ap = argparse.ArgumentParser(prog="python -m tests.harness.slurmfleet")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="a Slurm fleet that stays up until `down`")
    up.add_argument("-n", "--nodes", type=int, default=3)
    up.add_argument("--name", default="sdev")
    up.add_argument("--slurm", default="22.05", choices=slurm24.VERSIONS, help="Slurm release")
    down = sub.add_parser("down", help="stop it and remove everything")
    down.add_argument("--name", default="sdev")
    st = sub.add_parser("status")
    st.add_argument("--name", default="sdev")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "up":
            sf = start_slurm_fleet(a.nodes, a.name, owned=False, version=a.slurm)
            print(
                f"Slurm fleet {sf.name} up in {sf.start_seconds:.1f} s: "
                f"export SLURM_CONF={sf.slurm.conf}; ssh -F {sf.fleet.ssh_config} node-1"
            )
        elif a.cmd == "down":
            errors = []
            try:
                fl.attach(a.name).down()
            except FleetError as exc:
                errors.append(str(exc))
            with sl.lock():
                rec = sl.read_record(sl.SLURM_ROOT / a.name)
                if rec:
                    sl.teardown(rec, remove_dir=True)
            if errors:
                raise SlurmFleetError("; ".join(errors))
            print(f"Slurm fleet {a.name} down")
        else:
            sf = attach(a.name)
            keys = ("address", "state", "state_flags", "reason", "boot_time", "gres")
            nodes = sf.slurm.nodes()
            info = {n: {k: nodes.get(n, {}).get(k) for k in keys} for n in sf.slurm.node_names}
            print(json.dumps({"SLURM_CONF": str(sf.slurm.conf), "nodes": info}, indent=1))
    except (SlurmFleetError, FleetError, SlurmError) as exc:
        print(f"slurmfleet: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
