"""A real Receptor mesh for tests: the controller's node and N execution nodes.

The ``receptor`` binary is built from Go modules by ``scripts/setup.d/34-receptor.sh``
(pins in ``tests/receptor``) twice: stock, the default (what operators run), and with the
fixes in ``tests/receptor/patches`` applied (``find_binaries(patched=True)``, or
``FLEETMEDIC_RECEPTOR_PATCHED=1``): v1.4.4 as released wedges a mesh link when many work
units are in flight. ``receptorctl`` and ``ansible-runner`` come from the venv.

    mesh = start_mesh({"exec-1": [fleet.node(1)], "exec-2": [fleet.node(2), fleet.node(3)]})
    mesh.receptorctl("work", "submit", mesh.work_type, "--node", "exec-1",
                     "--tls-client", mesh.tls_client, "--signwork", "--payload", "job", ...)
    mesh.executor_for("node-2").id                   # "exec-2"
    mesh.node("exec-1").kill(); mesh.node("exec-1").start()
    mesh.stop()

Layout:

- **controller** (node ID ``controller``): a ``receptor`` process in the host's network
  namespace, where fleetmedic's controller runs. Its control socket
  (:attr:`Mesh.socket`) is what ``receptorctl --socket`` and an executor talk to. It
  dials every execution node (``tcp-peer``, TLS client ``mesh-client``) and signs the
  work it submits (``work-signing``).
- **execution nodes**: one ``receptor`` process each, in its own network namespace
  ``fmrx-<mesh>-<id>``, with one veth per fleet bridge its share lives on, at
  ``192.168.<octet>.2-9``. It listens with TLS that requires a client certificate from
  the mesh CA, serves its control service over the mesh with the same TLS (remote work
  submission is mutual TLS too), verifies work signatures, and runs the work type
  ``ansible-runner`` as ``ansible-runner worker`` from the venv. iptables in the
  namespace let it reach only its share of the fleet nodes (and the host end of the
  bridge); the namespace has no default route, so other fleets are out of reach too.
- **TLS**: one CA, one certificate per node carrying the node ID as Receptor's
  otherName (tests/harness/mesh_pki.py). Files in ``<dir>/pki``: :attr:`Mesh.tls`.

Execution nodes share the host's file system (their own ``HOME`` and ``TMPDIR`` under
``<dir>/<id>/``), so paths in a transmitted job resolve on them; a real remote node would
need its SSH key sent in the job. Faults: :meth:`ExecNode.kill` (the node dies, workers
included, or only receptor), :meth:`ExecNode.cut_mesh`/``heal_mesh`` (the mesh link
drops packets; its share stays reachable), :meth:`ExecNode.pause`/``resume``
(SIGSTOP: a unit that never reports back).

Meshes are recorded in ``$FLEETMEDIC_MESHES`` (``/run/fleetmedic/meshes``); one whose
owner died is swept (processes, namespaces, veths) before the next starts. Needs root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness import fleet_net as net
from tests.harness import mesh_net, procs
from tests.harness.fleet_sys import kill_and_wait, me
from tests.harness.mesh_net import MESH_ROOT, Link, MeshError, log
from tests.harness.mesh_pki import MeshPki

__all__ = [
    "MESH_ROOT",
    "Binaries",
    "ExecNode",
    "Link",
    "Mesh",
    "MeshError",
    "Tls",
    "start_mesh",
    "two_shares",
]

RECEPTOR_SRC = procs.ROOT / "tests" / "receptor"
# Keep in sync with scripts/setup.d/34-receptor.sh: the files that define the build.
KEY_FILES = ("go.mod", "go.sum")
PATCHES = "patches"  # *.patch in name order, applied to the pinned module
CONTROLLER_ID = "controller"
WORK_TYPE = "ansible-runner"
TLS_CLIENT = "mesh-client"
TLS_SERVER = "mesh-server"
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,15}$")


# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Binaries:
    dir: Path
    receptor: Path
    receptorctl: Path
    ansible_runner: Path
    versions: dict[str, str]


def build_key(patched: bool = False) -> str:
    patches = sorted(p.name for p in (RECEPTOR_SRC / PATCHES).glob("*.patch")) if patched else []
    return procs.cache_key(RECEPTOR_SRC, [*KEY_FILES, *(f"{PATCHES}/{p}" for p in patches)])


def find_binaries(patched: bool | None = None) -> Binaries:
    """The built receptor for the current pins (stock, or with tests/receptor/patches
    when ``patched``; None: ``FLEETMEDIC_RECEPTOR_PATCHED=1`` says) plus the venv's
    receptorctl and ansible-runner, or MeshError saying how to get them.
    ``FLEETMEDIC_RECEPTOR_BIN`` overrides the receptor directory. Both switches are
    refused under ``CI=true`` (a test that means the patched build asks for it)."""
    if patched is None:
        try:
            procs.refuse_under_ci(
                {k: os.environ.get(k, "") for k in ("CI", "FLEETMEDIC_RECEPTOR_PATCHED")}
            )
        except procs.ReplacedUnderCI as e:
            raise MeshError(str(e)) from None
        patched = os.environ.get("FLEETMEDIC_RECEPTOR_PATCHED") == "1"
    version = procs.pinned(RECEPTOR_SRC / "go.mod", "github.com/ansible/receptor")
    d = procs.built_dir(
        "FLEETMEDIC_RECEPTOR_BIN",
        f"receptor-bin-{version}-{build_key(patched)}",
        ("receptor",),
        MeshError,
        "bash scripts/setup.d/34-receptor.sh",
    )
    venv_bin = Path(sys.executable).parent
    tools = {n: venv_bin / n for n in ("receptorctl", "ansible-runner", "ansible-playbook")}
    missing = [n for n, p in tools.items() if not p.exists()]
    if missing:
        raise MeshError(
            f"{', '.join(missing)} not in {venv_bin}; run: .venv/bin/pip install -e '.[test]'"
        )
    versions = procs.read_versions(d)
    return Binaries(d, d / "receptor", tools["receptorctl"], tools["ansible-runner"], versions)


# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Tls:
    """The mesh's TLS files (PEM), for an executor or ``receptorctl --rootcas ...``."""

    ca: Path
    controller_cert: Path
    controller_key: Path
    work_signing_key: Path
    work_verification_key: Path


@dataclass
class ExecNode:
    """One execution node: a receptor process in its own network namespace."""

    mesh: Mesh = field(repr=False)
    id: str
    share: list[Any]  # tests.harness.fleet.Node
    netns: str
    links: list[Link]
    port: int
    proc: subprocess.Popen | None = field(default=None, repr=False)
    starts: int = 0

    @property
    def dir(self) -> Path:
        return self.mesh.dir / self.id

    @property
    def socket(self) -> Path:
        return self.dir / "receptor.sock"

    @property
    def config_file(self) -> Path:
        return self.dir / "receptor.yml"

    @property
    def log(self) -> Path:
        return self.dir / "receptor.log"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def address(self) -> str:
        """Where the controller dials it (its address on the first share's bridge)."""
        return self.links[0].address

    @property
    def hosts(self) -> list[str]:
        return [n.name for n in self.share]

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def config(self) -> list[dict]:
        crt, key = self.mesh.pki.dir / f"{self.id}.crt", self.mesh.pki.dir / f"{self.id}.key"
        return [
            {"node": {"id": self.id, "datadir": str(self.data_dir)}},
            {"log-level": self.mesh.log_level},
            {
                "tls-server": {
                    "name": TLS_SERVER,
                    "cert": str(crt),
                    "key": str(key),
                    "requireclientcert": True,
                    "clientcas": str(self.mesh.pki.ca_file),
                }
            },
            {"tcp-listener": {"bindaddr": "0.0.0.0", "port": self.port, "tls": TLS_SERVER}},
            {
                "control-service": {
                    "service": "control",
                    "filename": str(self.socket),
                    "tls": TLS_SERVER,
                }
            },
            {"work-verification": {"publickey": str(self.mesh.pki.work_verification_key)}},
            {
                "work-command": {
                    "worktype": WORK_TYPE,
                    "command": str(self.mesh.bin.ansible_runner),
                    "params": "worker",
                    "allowruntimeparams": True,
                    "verifysignature": True,
                }
            },
        ]

    def env(self) -> dict[str, str]:
        """The node's environment: the venv first on PATH (ansible-runner finds
        ansible-playbook through it), a HOME and TMPDIR of its own."""
        venv_bin = str(self.mesh.bin.ansible_runner.parent)
        return {
            "PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.dir / "home"),
            "TMPDIR": str(self.dir / "tmp"),
            "LANG": "C.UTF-8",
            "ANSIBLE_LOCAL_TEMP": str(self.dir / "home" / ".ansible" / "tmp"),
        }

    def start(self) -> None:
        """Start (or restart) its receptor; returns once it listens."""
        if self.pid:
            return
        for d in (self.dir / "home", self.dir / "tmp", self.data_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self.socket.unlink(missing_ok=True)  # a killed receptor leaves its socket behind
        self.proc = procs.spawn(
            [
                "ip",
                "netns",
                "exec",
                self.netns,
                str(self.mesh.bin.receptor),
                "--config",
                str(self.config_file),
            ],
            self.log,
            cwd=self.dir,
            env=self.env(),
        )
        self.starts += 1
        self.mesh.spawned.append(self.proc.pid)
        _wait_socket(self.socket, self.proc, self.log, f"execution node {self.id}")

    def stop(self) -> None:
        """Stop receptor (SIGTERM) and every process left in the namespace."""
        procs.stop(self.proc, timeout=10)
        self.proc = None
        left = kill_and_wait(net.netns_pids(self.netns))
        if left:
            log(f"{self.id}: processes {left} survived SIGKILL")

    def kill(self, everything: bool = True) -> None:
        """SIGKILL: the node dies with its workers (``everything``), or only receptor
        dies and its ``ansible-runner worker`` processes run on."""
        procs.stop(self.proc, timeout=5, sig=signal.SIGKILL)
        self.proc = None
        if everything:
            kill_and_wait(net.netns_pids(self.netns))

    def pause(self) -> None:
        """SIGSTOP receptor: the node stays connected at TCP level but answers nothing."""
        if self.pid:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.pid:
            os.kill(self.pid, signal.SIGCONT)

    def cut_mesh(self) -> None:
        """Drop every mesh packet to and from this node (a cut link: no RST, no FIN);
        its SSH share stays reachable."""
        for rule in self._mesh_rules():
            mesh_net.ipt(self.netns, "-I", *rule)

    def heal_mesh(self) -> None:
        for rule in self._mesh_rules():
            mesh_net.ipt(self.netns, "-D", *rule, check=False)

    def _mesh_rules(self) -> list[list[str]]:
        return [
            ["INPUT", "-p", "tcp", "--dport", str(self.port), "-j", "DROP"],
            ["OUTPUT", "-p", "tcp", "--sport", str(self.port), "-j", "DROP"],
        ]

    def link_down(self) -> None:
        """Unplug every cable of the node: mesh and share both unreachable."""
        for link in self.links:
            net.ip("link", "set", link.host_veth, "down")

    def link_up(self) -> None:
        for link in self.links:
            net.ip("link", "set", link.host_veth, "up")

    def run(self, argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a command inside the node's network namespace."""
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def can_connect(self, address: str, port: int = 22, timeout: float = 2.0) -> bool:
        """Whether a TCP connection from inside the node to ``address:port`` succeeds."""
        code = (
            "import socket,sys;"
            "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))"
        )
        p = self.run([sys.executable, "-c", code, address, str(port), str(timeout)], timeout + 10)
        return p.returncode == 0

    def work_units(self) -> dict[str, dict]:
        """``work list`` on this node (its own control socket): unit ID -> status."""
        return self.mesh.control_command(self.socket, "work list")

    def unit_dirs(self) -> list[str]:
        """Work unit directories on disk (Receptor keeps ``<datadir>/<node>/<unit>``)."""
        d = self.data_dir / self.id
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


@dataclass
class Mesh:
    name: str
    dir: Path
    bin: Binaries = field(repr=False)
    pki: MeshPki = field(repr=False)
    log_level: str = "info"
    exec_nodes: list[ExecNode] = field(default_factory=list)
    controller: subprocess.Popen | None = field(default=None, repr=False)
    spawned: list[int] = field(default_factory=list)

    # -- what an executor needs -------------------------------------------------
    @property
    def socket(self) -> Path:
        """The controller node's control socket (``receptorctl --socket``)."""
        return self.dir / CONTROLLER_ID / "receptor.sock"

    @property
    def controller_id(self) -> str:
        return CONTROLLER_ID

    @property
    def work_type(self) -> str:
        return WORK_TYPE

    @property
    def tls_client(self) -> str:
        """The TLS client name to submit remote work with (``--tls-client``)."""
        return TLS_CLIENT

    @property
    def tls(self) -> Tls:
        return Tls(
            ca=self.pki.ca_file,
            controller_cert=self.pki.dir / f"{CONTROLLER_ID}.crt",
            controller_key=self.pki.dir / f"{CONTROLLER_ID}.key",
            work_signing_key=self.pki.work_signing_key,
            work_verification_key=self.pki.work_verification_key,
        )

    @property
    def controller_log(self) -> Path:
        return self.dir / CONTROLLER_ID / "receptor.log"

    @property
    def controller_data_dir(self) -> Path:
        return self.dir / CONTROLLER_ID / "data"

    @property
    def routes(self) -> dict[str, str]:
        """Fleet node name -> the execution node that reaches it."""
        return {h: ex.id for ex in self.exec_nodes for h in ex.hosts}

    def settings(self) -> dict[str, Any]:
        """Everything an executor is configured with, as plain data."""
        return {
            "socket": str(self.socket),
            "work_type": self.work_type,
            "tls_client": self.tls_client,
            "sign_work": True,
            "ca": str(self.tls.ca),
            "cert": str(self.tls.controller_cert),
            "key": str(self.tls.controller_key),
            "execution_nodes": {ex.id: ex.hosts for ex in self.exec_nodes},
        }

    def node(self, id: str) -> ExecNode:
        for ex in self.exec_nodes:
            if ex.id == id:
                return ex
        raise MeshError(f"mesh {self.name} has no execution node {id!r}")

    def executor_for(self, host: str) -> ExecNode:
        """The execution node whose share holds fleet node ``host``."""
        for ex in self.exec_nodes:
            if host in ex.hosts:
                return ex
        raise MeshError(f"no execution node of mesh {self.name} reaches {host!r}")

    def __enter__(self) -> Mesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the controller's node ------------------------------------------------------
    def controller_config(self) -> list[dict]:
        t = self.tls
        cfg: list[dict] = [
            {"node": {"id": CONTROLLER_ID, "datadir": str(self.controller_data_dir)}},
            {"log-level": self.log_level},
            {
                "tls-client": {
                    "name": TLS_CLIENT,
                    "cert": str(t.controller_cert),
                    "key": str(t.controller_key),
                    "rootcas": str(t.ca),
                }
            },
            {"control-service": {"service": "control", "filename": str(self.socket)}},
            {"work-signing": {"privatekey": str(t.work_signing_key), "tokenexpiration": "1h"}},
        ]
        for ex in self.exec_nodes:
            cfg.append({"tcp-peer": {"address": f"{ex.address}:{ex.port}", "tls": TLS_CLIENT}})
        return cfg

    def start_controller(self) -> None:
        if self.controller and self.controller.poll() is None:
            return
        d = self.dir / CONTROLLER_ID
        self.controller_data_dir.mkdir(parents=True, exist_ok=True)
        (d / "receptor.yml").write_text(yaml.safe_dump(self.controller_config(), sort_keys=False))
        self.socket.unlink(missing_ok=True)
        self.controller = procs.spawn(
            [str(self.bin.receptor), "--config", str(d / "receptor.yml")],
            self.controller_log,
            cwd=d,
        )
        self.spawned.append(self.controller.pid)
        _wait_socket(self.socket, self.controller, self.controller_log, "controller node")

    def stop_controller(self) -> None:
        procs.stop(self.controller, timeout=10)
        self.controller = None

    # -- control ----------------------------------------------------------------
    def control_command(self, socket: Path, command: str) -> dict:
        """One command on a control socket (``status``, ``work list``, ...) as JSON."""
        from receptorctl.socket_interface import ReceptorControl

        rc = ReceptorControl(f"unix:{socket}")
        try:
            return rc.simple_command(command)
        except Exception as exc:  # receptorctl raises bare RuntimeError/OSError
            raise MeshError(f"{command!r} on {socket}: {exc}") from exc
        finally:
            rc.close()

    def status(self) -> dict:
        """The controller node's ``status`` (RoutingTable, Advertisements, ...)."""
        return self.control_command(self.socket, "status")

    def work_units(self) -> dict[str, dict]:
        """``work list`` on the controller's node: unit ID -> status."""
        return self.control_command(self.socket, "work list")

    def unit_dirs(self) -> dict[str, list[str]]:
        """Work unit directories on disk on every node (controller included)."""
        d = self.controller_data_dir / CONTROLLER_ID
        out = {CONTROLLER_ID: sorted(p.name for p in d.iterdir()) if d.is_dir() else []}
        for ex in self.exec_nodes:
            out[ex.id] = ex.unit_dirs()
        return out

    def receptorctl(
        self, *args: str, check: bool = True, timeout: float = 120, input: bytes | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``receptorctl --socket <controller socket> ARGS`` (bytes out)."""
        p = subprocess.run(
            [str(self.bin.receptorctl), "--socket", str(self.socket), *args],
            capture_output=True,
            timeout=timeout,
            input=input,
        )
        if check and p.returncode != 0:
            err = p.stderr.decode(errors="replace").strip().splitlines() or [f"rc {p.returncode}"]
            raise MeshError(f"receptorctl {' '.join(args)}: {err[-1]}")
        return p

    def wait_connected(self, ids: Sequence[str] | None = None, timeout: float = 30.0) -> float:
        """Wait until the controller has a route to each execution node (then work can
        be submitted to it). Returns the seconds waited.

        Not waited for: the node's service advertisement listing its work types. A node
        floods it 5 s after start and then every 60 s, so a controller that connects
        after the first flood sees it only up to a minute later; submitting work does
        not need it (:meth:`work_types` reads it)."""
        want = set(ids if ids is not None else (ex.id for ex in self.exec_nodes))
        t0 = time.monotonic()
        missing, seen = want, "no status"
        while True:
            try:
                routes = set((self.status().get("RoutingTable") or {}).keys())
                missing, seen = want - routes, f"routes {sorted(routes)}"
            except MeshError as exc:
                missing, seen = want, str(exc)
            if not missing:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                ex = self.node(sorted(missing)[0])
                raise MeshError(
                    f"controller has no route to {', '.join(sorted(missing))} after "
                    f"{timeout:.0f}s ({seen}): {procs.last_line(ex.log)} (log: {ex.log})"
                )
            time.sleep(0.1)

    def work_types(self) -> dict[str, list[str]]:
        """Node ID -> the work types its advertisement (as the controller last saw it)
        lists."""
        return {
            a["NodeID"]: [w["WorkType"] for w in a.get("WorkCommands") or []]
            for a in self.status().get("Advertisements") or []
        }

    def stop(self) -> None:
        """Stop every node and remove namespaces, veths and the record (logs stay)."""
        self.stop_controller()
        for ex in self.exec_nodes:
            ex.stop()
        with mesh_net.lock():
            mesh_net.teardown(mesh_net.read_record(self.dir) or self._record(), remove_dir=False)
            (self.dir / "mesh.json").unlink(missing_ok=True)

    def _record(self) -> dict:
        return {
            "name": self.name,
            "dir": str(self.dir),
            "owner": me(),
            "exec_nodes": [
                {"id": ex.id, "netns": ex.netns, "veths": [lk.host_veth for lk in ex.links]}
                for ex in self.exec_nodes
            ],
        }


# ---------------------------------------------------------------------------
def _wait_socket(path: Path, proc: subprocess.Popen, logf: Path, what: str) -> None:
    deadline = time.monotonic() + 20
    while not path.exists():
        if proc.poll() is not None:
            raise MeshError(
                f"{what}: receptor exited with code {proc.returncode}: "
                f"{procs.last_line(logf)} (log: {logf})"
            )
        if time.monotonic() > deadline:
            raise MeshError(f"{what}: no control socket after 20s (log: {logf})")
        time.sleep(0.02)


_serial = iter(range(1, 10**6))


def two_shares(fleet: Any) -> dict[str, list[Any]]:
    """The usual split of a 3-node fleet: exec-1 reaches node-1, exec-2 node-2 and node-3."""
    return {"exec-1": [fleet.node(1)], "exec-2": [fleet.node(2), fleet.node(3)]}


def start_mesh(
    shares: Mapping[str, Sequence[Any]],
    *,
    name: str | None = None,
    workdir: Path | None = None,
    log_level: str = "info",
    binaries: Binaries | None = None,
    timeout: float = 30.0,
) -> Mesh:
    """Start the controller's node and one execution node per ``shares`` entry
    (``{"exec-1": [fleet nodes...], ...}``); wait until the controller routes to
    each. ``workdir`` defaults to ``$FLEETMEDIC_MESHES/<name>``. On failure everything
    is torn down (logs stay) and MeshError says where to look."""
    if os.geteuid() != 0:
        raise MeshError("the test mesh needs root (network namespaces, iptables)")
    if not shutil.which("iptables"):
        raise MeshError("iptables not found; run: bash scripts/setup.sh")
    for ex_id, share in shares.items():
        if not _ID_RE.match(ex_id) or ex_id == CONTROLLER_ID:
            raise MeshError(f"bad execution node id {ex_id!r}: use 1-16 of [a-z0-9-]")
        if not share:
            raise MeshError(f"execution node {ex_id} has an empty share")
    b = binaries or find_binaries()
    name = name or f"m{os.getpid()}-{next(_serial)}"
    d = Path(workdir) if workdir else MESH_ROOT / name
    if d.exists() and (d / "mesh.json").exists():
        raise MeshError(f"mesh directory {d} is in use")
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    mesh = Mesh(name=name, dir=d, bin=b, pki=MeshPki(d / "pki"), log_level=log_level)
    try:
        with mesh_net.lock():
            mesh_net.cleanup_stale()
            taken = mesh_net.taken_addresses()
            for ex_id, share in shares.items():
                mesh.exec_nodes.append(
                    ExecNode(
                        mesh=mesh,
                        id=ex_id,
                        share=list(share),
                        netns=f"{mesh_net.NETNS_PREFIX}{name}-{ex_id}",
                        links=mesh_net.allocate_links((n.fleet.octet for n in share), taken),
                        port=27199,  # Receptor's usual port; each node has its own address
                    )
                )
            (d / "mesh.json").write_text(json.dumps(mesh._record(), indent=1))
            for ex in mesh.exec_nodes:
                mesh_net.plumb(ex.netns, ex.links, ex.share)
        for ex in mesh.exec_nodes:
            mesh.pki.node_cert(ex.id, [lk.address for lk in ex.links])
        mesh.pki.node_cert(CONTROLLER_ID, ["127.0.0.1"])
        for ex in mesh.exec_nodes:
            ex.start()
        mesh.start_controller()
        mesh.wait_connected(timeout=timeout)
    except BaseException as exc:
        mesh.stop()
        if isinstance(exc, MeshError | KeyboardInterrupt):
            raise
        raise MeshError(
            f"mesh {name}: start failed: {net.one_line(str(exc))}; logs in {d}"
        ) from exc
    log(
        f"mesh {name}: controller + {len(mesh.exec_nodes)} execution nodes up in "
        f"{time.monotonic() - t0:.1f} s; socket {mesh.socket}"
    )
    return mesh
