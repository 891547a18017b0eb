"""A test fleet of real SSH nodes that really reboot.

Each node is a ``systemd-nspawn --boot`` container running systemd and sshd, on a
per-node overlay over one shared debootstrap tree (scripts/setup.d/20-nodetree.sh), in
its own network namespace with a veth on the fleet's private bridge. A per-fleet
supervisor process (tests/harness/fleet_supervisor.py) boots the nodes again when
``systemctl reboot`` makes nspawn exit 133, so the unmodified ``ansible.builtin.reboot``
sees a new boot_id.

Layout of a fleet (``FLEETS_ROOT/<name>/``)::

    fleet.json            the record (octet, nodes, supervisor and owner pids)
    inventory.yml         Ansible inventory (ansible_host, key, known_hosts, ServerAlive)
    known_hosts           every node's host key (generated here, per node)
    ssh/id_ed25519        the fleet's client key (root login)
    ssh_config            for humans: ``ssh -F <dir>/ssh_config node-1``
    supervisor.log
    nodes/<node>/         root/ (overlay mount), upper/, work/, state/ (the node's
                          /var/lib/fleetmedic-test: kern.log, nvml.json, amd.json),
                          console.log, boots.log, status.json, fault files
                          (hang, boot-delay, power-on)

Use it from pytest (tests/harness/fleet_fixtures.py), from Python::

    with start_fleet(3) as fleet:
        fleet.node(2).ssh("systemctl reboot", check=False)

or from the shell: ``python -m tests.harness.fleet up|down|status|ssh|fault|cleanup``.

Addresses: fleet /24 from 192.168.240.0/24..192.168.254.0/24, host side .1, nodes
.11, .12, ... Needs root. Known gaps: no added latency/loss (the kernel has no netem;
``throttle`` is a tbf rate limit); ``tests/fakes/build`` is bind-mounted only at
(re)boot, when it exists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.harness import fleet_cgroup
from tests.harness import fleet_net as net
from tests.harness.fleet_sys import (
    FLEETS_ROOT,
    cleanup_stale,
    fleets_lock,
    is_live,
    leftovers,
    log,
    me,
    proc_alive,
    proc_start,
    read_record,
    teardown_resources,
)
from tests.harness.loadscale import Deadline

ROOT = Path(__file__).resolve().parents[2]
NODETREE_SCRIPT = ROOT / "scripts" / "setup.d" / "20-nodetree.sh"
SERVER_ALIVE = ["-o", "ServerAliveInterval=3", "-o", "ServerAliveCountMax=2"]
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,23}$")

__all__ = [
    "FLEETS_ROOT",
    "Fleet",
    "FleetError",
    "Node",
    "NodeSetup",
    "attach",
    "cleanup_stale",
    "leftovers",
    "list_fleets",
    "start_fleet",
]


class FleetError(RuntimeError):
    """A fleet could not be started, driven or torn down. The message is one line."""


# --- nodes and fleets ------------------------------------------------------------------


@dataclass
class NodeSetup:
    """What a node needs beyond the plain SSH node, returned by ``start_fleet``'s
    ``prepare`` hook (which also writes the node's extra files into its root before the
    first boot). Kept in fleet.json; the supervisor applies it at every boot."""

    nspawn_args: list[str] = field(default_factory=list)
    """Extra ``systemd-nspawn`` arguments (capabilities, binds, system call filter)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of ``systemd-nspawn`` (e.g. ``SYSTEMD_NSPAWN_*`` switches)."""
    own_cgroup: bool = False
    """Start the node from cgroups of its own (fleet_cgroup), e.g. for a kubelet."""
    fresh_boottime: bool = False
    """Boot the node in a time namespace of its own, so that its boot time is the moment
    each boot starts (``/proc/uptime`` starts near 0), as on a real host. A plain node
    shows the host's boot time at every boot; slurmctld decides from a node's boot time
    whether it rebooted (tests/harness/slurmfleet.py)."""


@dataclass
class Node:
    """One simulated host. ``index`` is 1-based; ``node(2)`` is ``node-2``."""

    fleet: Fleet = field(repr=False)
    name: str
    index: int
    address: str
    netns: str
    veth: str
    machine_id: str

    @property
    def dir(self) -> Path:
        return self.fleet.dir / "nodes" / self.name

    @property
    def state_dir(self) -> Path:
        """Host side of the node's /var/lib/fleetmedic-test (kern.log, nvml.json, amd.json)."""
        return self.dir / "state"

    @property
    def kern_log(self) -> Path:
        return self.state_dir / "kern.log"

    def diag_calls(self) -> list[dict]:
        """What the node's fake dcgmi and rvs were asked for, oldest first: ``{"tool":
        "dcgmi", "argv": [...], "level": 2}`` a run (tests/fakes/diag/replay.py logs them)."""
        from tests.fakes.diag import replay

        return replay.calls(self.state_dir / "diag-calls.jsonl")

    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"

    def status(self) -> dict:
        """``{"state": running|rebooting|hung|booting-slowly|off|crashed|failed|stopped,
        "boots": n, "pid": nspawn pid, "since": t}`` as the supervisor last wrote it."""
        try:
            return json.loads((self.dir / "status.json").read_text())
        except (OSError, ValueError):
            return {"state": "unknown", "boots": 0}

    @property
    def boots(self) -> int:
        return int(self.status().get("boots", 0))

    def ssh_command(self, command: str | None = None) -> list[str]:
        cmd = ["ssh", *self.fleet.ssh_options(), f"root@{self.address}"]
        return cmd + ([command] if command is not None else [])

    def ssh(
        self, command: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """Run a shell command on the node as root (host keys checked)."""
        try:
            p = subprocess.run(
                self.ssh_command(command), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise FleetError(
                f"{self.name}: ssh {command!r} timed out after {timeout:.0f} s"
            ) from None
        if check and p.returncode != 0:
            err = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            raise FleetError(f"{self.name}: ssh {command!r} failed (rc {p.returncode}): {err}")
        return p

    def boot_id(self) -> str:
        return self.ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip()

    def wait_ssh(self, timeout: float = 30.0) -> float:
        """Wait until sshd answers with its banner; returns seconds waited."""
        return self.fleet.wait_ssh([self], timeout)

    # fault injection -------------------------------------------------------------
    def set_hang(self, on: bool = True) -> None:
        """``on``: the next reboot never comes back (until ``set_hang(False)``)."""
        _flag(self.dir / "hang", on)

    def set_boot_delay(self, seconds: float) -> None:
        """A slow boot: wait ``seconds`` before each later boot (0 = off)."""
        if seconds > 0:
            (self.dir / "boot-delay").write_text(f"{seconds}\n")
        else:
            (self.dir / "boot-delay").unlink(missing_ok=True)

    def link_down(self) -> None:
        """Unplug the cable: ``ip link set <veth> down`` on the host end."""
        net.set_link(self.fleet.octet, self.index, up=False)

    def link_up(self) -> None:
        net.set_link(self.fleet.octet, self.index, up=True)

    def throttle(self, rate: str | None) -> None:
        """Rate-limit the node's link both ways with tc tbf (``"10mbit"``); None removes it."""
        net.throttle(self.fleet.octet, self.index, self.name, rate)

    def power_on(self) -> None:
        """Boot a node that was powered off (``systemctl poweroff``) or gave up after crashes."""
        (self.dir / "power-on").touch()


def _flag(path: Path, on: bool) -> None:
    if on:
        path.touch()
    else:
        path.unlink(missing_ok=True)


@dataclass
class Fleet:
    name: str
    dir: Path
    octet: int
    nodes: list[Node] = field(default_factory=list)

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.yml"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def private_key(self) -> Path:
        return self.dir / "ssh" / "id_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def host_address(self) -> str:
        """The host's address on the fleet bridge (nodes reach host services here)."""
        return net.host_address(self.octet)

    @property
    def bridge(self) -> str:
        return net.bridge_name(self.octet)

    def node(self, key: int | str) -> Node:
        """``node(2)``, ``node("2")`` or ``node("node-2")``."""
        if isinstance(key, str) and key.isdigit():
            key = int(key)
        for n in self.nodes:
            if key in (n.index, n.name):
                return n
        raise FleetError(f"fleet {self.name} has no node {key!r}")

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def ssh_options(self) -> list[str]:
        return [
            "-F",
            "/dev/null",
            "-i",
            str(self.private_key),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            *SERVER_ALIVE,
            "-o",
            "LogLevel=ERROR",
        ]

    def record(self) -> dict:
        return json.loads((self.dir / "fleet.json").read_text())

    def wait_ssh(self, nodes: list[Node] | None = None, timeout: float = 30.0) -> float:
        """Wait until every node's sshd sends its banner. One-line FleetError naming the
        first node that did not, with its console log. ``timeout`` is an idle machine's
        figure, stretched by the load (tests/harness/loadscale.py)."""
        t0 = time.monotonic()
        deadline = Deadline(timeout)
        pending = list(nodes if nodes is not None else self.nodes)
        while pending:
            pending = [n for n in pending if not _ssh_banner(n.address)]
            if not pending:
                break
            sup = self.record().get("supervisor")
            if sup and not proc_alive(sup["pid"], sup["start"]):
                raise FleetError(
                    f"fleet {self.name}: supervisor died; log at {self.dir / 'supervisor.log'}"
                )
            failed = [n for n in pending if n.status().get("state") == "failed"]
            if failed or deadline.passed():
                n = (failed or pending)[0]
                within = f"did not reach sshd within {deadline.allowed():.0f} s"
                why = "failed to boot" if failed else within
                raise FleetError(f"{n.name} {why}; console log at {n.console_log}")
            time.sleep(0.05)
        return time.monotonic() - t0

    def reset_faults(self, timeout: float = 30.0) -> None:
        """Undo every fault (hang, slow boot, link down, throttle, off) and wait for sshd."""
        for n in self.nodes:
            n.set_hang(False)
            n.set_boot_delay(0)
            n.link_up()
            n.throttle(None)
            if n.status().get("state") in ("off", "failed"):
                n.power_on()
        self.wait_ssh(timeout=timeout)

    def status(self) -> dict:
        rec = self.record()
        sup = rec.get("supervisor")
        return {
            "name": self.name,
            "dir": str(self.dir),
            "subnet": f"192.168.{self.octet}.0/24",
            "supervisor_alive": bool(sup and proc_alive(sup["pid"], sup["start"])),
            "owner": rec.get("owner"),
            "inventory": str(self.inventory),
            "nodes": [{"name": n.name, "address": n.address, **n.status()} for n in self.nodes],
        }

    def down(self) -> None:
        """Stop every node and remove every namespace, bridge, mount, process and file of
        the fleet. Raises FleetError if anything is left behind."""
        t0 = time.monotonic()
        record = self.record() if (self.dir / "fleet.json").exists() else None
        teardown_resources(self.dir, record)
        left = leftovers(self.dir, record)
        if left:
            raise FleetError(f"fleet {self.name}: teardown left {', '.join(left)}")
        log(f"fleet {self.name} down in {time.monotonic() - t0:.1f} s")


def _ssh_banner(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=0.5) as s:
            s.settimeout(1.0)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def _fleet_from_record(rec: dict) -> Fleet:
    fleet = Fleet(name=rec["name"], dir=Path(rec["dir"]), octet=rec["octet"])
    fleet.nodes = [
        Node(
            fleet=fleet,
            name=n["name"],
            index=n["index"],
            address=n["address"],
            netns=n["netns"],
            veth=n["veth"],
            machine_id=n["machine_id"],
        )
        for n in rec["nodes"]
    ]
    return fleet


def attach(name: str) -> Fleet:
    """The running fleet called ``name`` (for the CLI and for tests sharing a fleet)."""
    path = FLEETS_ROOT / name / "fleet.json"
    if not path.exists():
        raise FleetError(f"no fleet named {name!r} (looked in {FLEETS_ROOT})")
    return _fleet_from_record(json.loads(path.read_text()))


def list_fleets() -> list[dict]:
    out = []
    for p in sorted(FLEETS_ROOT.glob("*/fleet.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        rec["live"] = is_live(rec)
        out.append(rec)
    return out


# --- starting a fleet ------------------------------------------------------------------

_serial = iter(range(1, 10**6))


def start_fleet(
    nodes: int = 3,
    name: str | None = None,
    *,
    owned: bool = True,
    boot_timeout: float = 120.0,  # (a node answers in about a second; a parallel suite on
    # 2 CPUs has kept one waiting over 30 s, which is load, not a failed boot)
    prefix: str = "fleet",
    prepare: Callable[[Fleet, Node], NodeSetup | None] | None = None,
    lower: str | None = None,
) -> Fleet:
    """Boot ``nodes`` nodes and wait until every sshd answers.

    ``prepare(fleet, node)`` runs for each node after its root is mounted and its
    identity written, before the first boot: it may write files into
    ``node.dir / "root"`` and return a :class:`NodeSetup` (or None: a plain node).
    The kubelet node (tests/harness/kubelet.py) is made this way. ``lower`` is an overlay
    lowerdir to boot the nodes from instead of the node tree's (the Slurm fleet puts a
    layer with slurmd over it: scripts/setup.d/22-nodetree-slurm.sh).

    ``name`` defaults to ``<prefix>-<pid>-<n>``. ``owned``: the fleet is torn down by its
    supervisor when this process dies (pytest); ``False`` keeps it up until ``down``
    (the CLI, Molecule). Stale fleets of crashed runs are removed first. On failure
    everything is torn down except the logs, and FleetError says where they are.
    """
    _preflight()
    lower = lower or _nodetree()
    name = name or f"{prefix}-{os.getpid()}-{next(_serial)}"
    if not _NAME_RE.match(name):
        raise FleetError(f"bad fleet name {name!r}: use 1-24 of [a-z0-9-]")
    if not 1 <= nodes <= 200:
        raise FleetError(f"a fleet has 1..200 nodes, not {nodes}")
    t0 = time.monotonic()
    d = FLEETS_ROOT / name
    with fleets_lock():
        cleanup_stale()
        if d.exists():
            rec = read_record(d)
            if rec and is_live(rec):
                raise FleetError(f"fleet {name} is already up; inventory at {d / 'inventory.yml'}")
            teardown_resources(d, rec)
        octet = _free_octet()
        rec = {
            "name": name,
            "dir": str(d),
            "octet": octet,
            "checkout": str(ROOT),
            "lowerdir": lower,
            "created": time.time(),
            "state": "starting",
            "creator": me(),
            "owner": me() if owned else None,
            "supervisor": None,
            "nodes": [
                {
                    "name": f"node-{i}",
                    "index": i,
                    "address": net.node_address(octet, i),
                    "netns": net.netns_name(octet, f"node-{i}"),
                    "veth": net.veth_name(octet, i),
                    "machine_id": uuid.uuid4().hex,
                }
                for i in range(1, nodes + 1)
            ],
        }
        d.mkdir(parents=True)
        _write_record(d, rec)
    fleet = _fleet_from_record(rec)
    try:
        _build(fleet, lower)
        if prepare is not None:
            _prepare(fleet, rec, prepare)
        logf = open(d / "supervisor.log", "ab")
        p = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.fleet_supervisor", str(d)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        logf.close()
        rec.update(supervisor={"pid": p.pid, "start": proc_start(p.pid)}, state="up")
        _write_record(d, rec)
        fleet.wait_ssh(timeout=boot_timeout)
    except BaseException as exc:
        teardown_resources(d, read_record(d) or rec, keep_logs=True)
        if isinstance(exc, FleetError | KeyboardInterrupt):
            raise
        raise FleetError(
            f"fleet {name}: start failed: {net.one_line(str(exc))}; logs in {d}"
        ) from exc
    log(
        f"fleet {name}: {nodes} nodes up in {time.monotonic() - t0:.1f} s "
        f"(192.168.{octet}.0/24); inventory {fleet.inventory}"
    )
    return fleet


def _preflight() -> None:
    if os.geteuid() != 0:
        raise FleetError("the test fleet needs root (namespaces, mounts, nspawn)")
    for tool in ("systemd-nspawn", "ip", "ssh", "ssh-keygen", "mount"):
        if not shutil.which(tool):
            raise FleetError(f"{tool} not found; run: bash scripts/setup.sh")
    _raise_inotify_instances()


INOTIFY_INSTANCES = 8192
"""Every node's systemd runs as the host's root and takes inotify instances from root's
one budget (``fs.inotify.max_user_instances``, 128 by default). Fleets, benches and
Molecule nodes side by side exhausted it: a node's systemd then logged "Too many open
files" for inotify and never started sshd (CI run, a Slurm fleet node, 120 s)."""


def _raise_inotify_instances() -> None:
    knob = Path("/proc/sys/fs/inotify/max_user_instances")
    try:
        if int(knob.read_text()) < INOTIFY_INSTANCES:
            knob.write_text(str(INOTIFY_INSTANCES))
    except (OSError, ValueError) as exc:
        log(f"could not raise fs.inotify.max_user_instances: {exc}")


def _nodetree() -> str:
    """The overlay lowerdir of the node tree; builds it first if this checkout's key has
    none yet (once, a few minutes; concurrent callers wait on the script's lock)."""
    cmd = ["bash", str(NODETREE_SCRIPT)]
    p = subprocess.run([*cmd, "--print"], capture_output=True, text=True)
    if p.returncode != 0:
        log("node tree for this checkout not built yet; building it now (once, a few minutes)")
        b = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if b.returncode != 0:
            raise FleetError(f"building the node tree failed: {net.one_line(b.stderr)[-400:]}")
        p = subprocess.run([*cmd, "--print"], capture_output=True, text=True)
        if p.returncode != 0:
            raise FleetError((p.stderr.strip().splitlines() or ["node tree not built"])[-1])
    return p.stdout.strip()


def _free_octet() -> int:
    used = {r["octet"] for r in list_fleets() if r["live"]}
    used |= set(net.ours_links().values()) | set(net.ours_netns().values())
    addrs = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True
    ).stdout
    used |= {o for o in net.OCTETS if f" 192.168.{o}." in addrs}
    free = [o for o in net.OCTETS if o not in used]
    if not free:
        raise FleetError("no free fleet subnet in 192.168.240-254.0/24 (too many fleets up?)")
    return free[0]


def _prepare(fleet: Fleet, rec: dict, prepare: Callable[[Fleet, Node], NodeSetup | None]) -> None:
    for node, nrec in zip(fleet.nodes, rec["nodes"], strict=True):
        setup = prepare(fleet, node)
        if setup is None:
            continue
        nrec["nspawn_args"] = list(setup.nspawn_args)
        nrec["nspawn_env"] = dict(setup.env)
        if setup.fresh_boottime:
            nrec["fresh_boottime"] = True
        if setup.own_cgroup:
            nrec["cgroups"] = fleet_cgroup.create(f"fleetmedic-{fleet.name}-{node.name}")
        _write_record(fleet.dir, rec)  # after each node: a failure still tears down its cgroups


def _write_record(d: Path, rec: dict) -> None:
    tmp = d / "fleet.json.tmp"
    tmp.write_text(json.dumps(rec, indent=1))
    tmp.replace(d / "fleet.json")


def _run(cmd: list[str]) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise FleetError(f"{' '.join(cmd)}: {net.one_line(p.stderr) or p.returncode}")


def _keygen(path: Path, comment: str) -> str:
    path.unlink(missing_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return Path(f"{path}.pub").read_text().strip()


def _build(fleet: Fleet, lower: str) -> None:
    """Keys, network, overlays and per-node identity files (before the first boot)."""
    d = fleet.dir
    (d / "ssh").mkdir(mode=0o700)
    client_pub = _keygen(fleet.private_key, f"fleetmedic-{fleet.name}")
    net.create_bridge(fleet.octet)
    hosts = "".join(f"{n.address} {n.name}\n" for n in fleet.nodes)
    known = []
    for n in fleet.nodes:
        for sub in ("upper", "work", "root", "state"):
            (n.dir / sub).mkdir(parents=True)
        n.kern_log.touch()
        n.console_log.touch()
        net.create_node_net(fleet.octet, n.index, n.name)
        _run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                f"lowerdir={lower},upperdir={n.dir / 'upper'},workdir={n.dir / 'work'}",
                str(n.dir / "root"),
            ]
        )
        r = n.dir / "root"
        (r / "etc/hostname").write_text(f"{n.name}\n")
        (r / "etc/hosts").write_text(
            f"127.0.0.1 localhost\n127.0.1.1 {n.name}\n::1 localhost ip6-localhost ip6-loopback\n"
            f"{fleet.host_address} fleet-host\n{hosts}"
        )
        (r / "etc/machine-id").write_text(f"{n.machine_id}\n")
        dbus_id = r / "var/lib/dbus/machine-id"
        if not dbus_id.is_symlink():
            dbus_id.unlink(missing_ok=True)
            dbus_id.symlink_to("/etc/machine-id")
        host_pub = _keygen(r / "etc/ssh/ssh_host_ed25519_key", f"root@{n.name}")
        known.append(f"{n.name},{n.address} {' '.join(host_pub.split()[:2])}\n")
        # The fake nvidia-smi, mig-parted, all_reduce_perf, dcgmi and rvs, like the AMD
        # tools in the node tree (dangling until the fakes are built: "not installed").
        # Per node, so the node tree's key stays.
        for tool in ("nvidia-smi", "nvidia-mig-parted", "all_reduce_perf", "dcgmi", "rvs"):
            link = r / "usr/local/bin" / tool
            if not link.is_symlink() and not link.exists():
                link.symlink_to(f"/opt/fleetmedic-fakes/bin/{tool}")
        auth = r / "root/.ssh/authorized_keys"
        auth.write_text(client_pub + "\n")
        auth.chmod(0o600)
    fleet.known_hosts.write_text("".join(known))
    _write_inventory(fleet)


def _write_inventory(fleet: Fleet) -> None:
    common = (
        f"-o UserKnownHostsFile={fleet.known_hosts} -o GlobalKnownHostsFile=/dev/null "
        f"-o StrictHostKeyChecking=yes {' '.join(SERVER_ALIVE)}"
    )
    inv = {
        "all": {
            "vars": {
                "ansible_user": "root",
                # beats ANSIBLE_HOST_KEY_CHECKING=False, which ansible-runner sets by default
                "ansible_host_key_checking": True,
                "ansible_ssh_private_key_file": str(fleet.private_key),
                "ansible_ssh_common_args": common,
                "ansible_control_path_dir": str(fleet.dir / "cp"),
                "ansible_python_interpreter": "/usr/bin/python3",
            },
            "hosts": {
                n.name: {"ansible_host": n.address, "fleetmedic_test_state_dir": str(n.state_dir)}
                for n in fleet.nodes
            },
        }
    }
    fleet.inventory.write_text(
        f"# fleet {fleet.name}, written by tests/harness/fleet.py\n"
        + yaml.safe_dump(inv, sort_keys=False)
    )
    hosts = "".join(f"Host {n.name}\n  HostName {n.address}\n" for n in fleet.nodes)
    fleet.ssh_config.write_text(
        f"{hosts}Host *\n  User root\n  IdentityFile {fleet.private_key}\n"
        f"  UserKnownHostsFile {fleet.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
        f"  StrictHostKeyChecking yes\n  ServerAliveInterval 3\n  ServerAliveCountMax 2\n"
    )


if __name__ == "__main__":
    from tests.harness.fleet_cli import main

    sys.exit(main())
