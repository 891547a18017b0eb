"""Real BMC endpoints for test-fleet nodes: one Redfish service (sushy-tools) per node,
whose power actions stop and boot the node's nspawn machine (tests/harness/bmc_redfish.py),
and pyghmi's IPMI BMC on UDP 623 of the same address (tests/harness/bmc_ipmi.py).

    bmcs = BmcSet(workdir).start(fleet)         # every node of the fleet
    bmc = bmcs[node.name]
    bmc.address                                  # "127.1.<octet>.<10+index>" (HTTPS, 443)
    bmc.add_sel("GPU 3 PCIe link down", severity="Critical")
    lost_until_power_off(node)                   # a fault a warm reboot does not cure
    hang_until_power_off(node)                   # a hung node: SSH connects, never answers
    bmc.actions()                                # ["ForceOff (was On)", "On (was Off)"]
    bmcs.stop()

Each BMC listens on a loopback address of its own (``127.1.<fleet octet>.<10+index>``,
mirroring the node's ``192.168.<octet>.<10+index>``) at the standard HTTPS port, so its
address is a plain host name, as a node label can carry it. TLS is a self-signed
certificate made here; basic auth checks an htpasswd file with a bcrypt hash (the only
kind sushy-tools accepts). The username and password are random per set, so a test can
look for them in every log, Event and email.

:class:`SilentBmc` is a BMC that does not answer: it accepts TCP connections on its
address and never says a word, so a client waits for its own timeout (the way an
unplugged or hung BMC behind a switch looks), unlike a refused connection.

The emulators are stopped with the set, and also when the process that started them
dies (PR_SET_PDEATHSIG), so a killed test run leaves none behind.
"""

from __future__ import annotations

import base64
import ctypes
import datetime as dt
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PORT = 443
_LIBC = ctypes.CDLL(None, use_errno=True)


def bmc_address(octet: int, index: int) -> str:
    """The loopback address of a fleet node's BMC."""
    return f"127.1.{octet}.{10 + index}"


def lost_until_power_off(node) -> None:
    """GPU 1 is lost through any warm reboot; cutting the power brings it back."""
    from tests.harness.ctlenv import HEALTHY_NVML, gpu_lost

    gpu_lost(node)
    (node.state_dir / "nvml.after-power-off.json").write_text(json.dumps(HEALTHY_NVML))


def hang_until_power_off(node) -> None:
    """The node hangs, as a machine whose kernel locked up: every process of its container
    is stopped (SIGSTOP), so TCP still connects but sshd never answers and a warm reboot
    cannot be asked for. Only a power cut (the BMC's ForceOff kills them all) ends it."""
    from tests.harness.ctlenv import process_tree

    nspawn = node.status().get("pid")
    if not nspawn:
        raise RuntimeError(f"{node.name} is not running")
    stopped: set[int] = set()
    for _ in range(20):  # again until no process of the container is left running
        todo = [p for p in process_tree(nspawn) if p != nspawn and p not in stopped]
        if not todo:
            return
        for pid in todo:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            stopped.add(pid)
    raise RuntimeError(f"{node.name}: processes kept appearing while stopping them")


def _stop_with_parent() -> None:
    _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Bmc:
    """The Redfish BMC of one fleet node."""

    node: str
    node_dir: Path
    address: str
    username: str
    password: str
    log: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"https://{self.address}"

    def add_sel(
        self, message: str, severity: str = "Critical", age: float = 0.0, **extra: str
    ) -> None:
        """One event log entry, ``age`` seconds old (its ``Created`` time, UTC)."""
        path = self.node_dir / "sel.json"
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError):
            entries = []
        created = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age)
        entries.append(
            {
                "Created": created.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
                "Severity": severity,
                "Message": message,
                "MessageId": extra.pop("MessageId", "Platform.1.0.PlatformEvent"),
                **extra,
            }
        )
        path.write_text(json.dumps(entries))

    def actions(self) -> list[str]:
        """Power requests the BMC accepted, oldest first ("ForceOff (was On)")."""
        try:
            lines = (self.node_dir / "bmc-actions.log").read_text().splitlines()
        except OSError:
            return []
        return [ln.split(" ", 1)[1] for ln in lines if " " in ln]

    def power_offs(self) -> int:
        return sum(a.split()[0] in ("ForceOff", "GracefulShutdown") for a in self.actions())

    def power_state(self) -> str:
        """What the BMC itself reports (On/Off), over Redfish with the credentials."""
        ctx = ssl._create_unverified_context()
        req = urllib.request.Request(f"{self.url}/redfish/v1/Systems")
        token = f"{self.username}:{self.password}".encode()
        req.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            member = json.load(r)["Members"][0]["@odata.id"]
        req = urllib.request.Request(self.url + member, headers=dict(req.header_items()))
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            return json.load(r)["PowerState"]


class BmcSet:
    """The BMCs of a fleet's nodes (all sharing one username, password and certificate)."""

    def __init__(self, workdir: Path, username: str | None = None, password: str | None = None):
        self.dir = workdir / "bmc"
        self.username = username or f"fm-{secrets.token_hex(4)}"  # IPMI: at most 16 bytes
        self.password = password or f"fm-pw-{secrets.token_urlsafe(9)}"  # IPMI: at most 20
        self.bmcs: dict[str, Bmc] = {}

    def __getitem__(self, node: str) -> Bmc:
        return self.bmcs[node]

    def __enter__(self) -> BmcSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(
        self,
        fleet,
        nodes: Iterable | None = None,
        timeout: float = 30.0,
        ipmi: bool = True,
        detached: bool = False,
    ) -> BmcSet:
        """A BMC per node (Redfish, and IPMI on UDP 623 unless ``ipmi`` is false).
        ``detached``: the emulators outlive this process (tests/harness/bmc_cli.py); with
        the set's directory under the fleet's, the fleet's teardown stops them (it ends every
        process whose command line names a file of the fleet)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        cert, key = self._tls()
        config = self._config()
        new = []
        for n in nodes or fleet.nodes:
            bmc = Bmc(
                node=n.name,
                node_dir=n.dir,
                address=bmc_address(fleet.octet, n.index),
                username=self.username,
                password=self.password,
                log=self.dir / f"{fleet.name}-{n.name}.log",
            )
            spec = self.dir / f"{fleet.name}-{n.name}.json"
            spec.write_text(
                json.dumps(
                    {
                        "name": n.name,
                        "machine_id": n.machine_id,
                        "node_dir": str(n.dir),
                        "address": bmc.address,
                        "port": PORT,
                        "config": str(config),
                        "cert": str(cert),
                        "key": str(key),
                        "ipmi": ipmi,
                        "username": self.username,
                        "password": self.password,  # IPMI's RMCP+ needs it in the clear
                    }
                )
            )
            spec.chmod(0o600)
            with bmc.log.open("ab") as out:
                bmc.proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.harness.bmc_redfish", str(spec)],
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    start_new_session=True,
                    preexec_fn=None if detached else _stop_with_parent,
                )
            self.bmcs[n.name] = bmc
            new.append(bmc)
        deadline = time.monotonic() + timeout
        for bmc in new:
            while not _answers(bmc.address):
                assert bmc.proc is not None
                if bmc.proc.poll() is not None or time.monotonic() > deadline:
                    tail = bmc.log.read_text(errors="replace").splitlines()[-5:]
                    self.stop()
                    raise RuntimeError(f"BMC of {bmc.node} did not start: {' | '.join(tail)}")
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        for bmc in self.bmcs.values():
            if bmc.proc and bmc.proc.poll() is None:
                bmc.proc.terminate()
                try:
                    bmc.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    bmc.proc.kill()
                    bmc.proc.wait()

    def _tls(self) -> tuple[Path, Path]:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        cert_path, key_path = self.dir / "bmc.crt", self.dir / "bmc.key"
        if cert_path.exists() and key_path.exists():
            return cert_path, key_path
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetmedic test BMC")])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .sign(key, hashes.SHA256())
        )
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_path.chmod(0o600)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert_path, key_path

    def _config(self) -> Path:
        import bcrypt

        htpasswd = self.dir / "htpasswd"
        digest = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        htpasswd.write_text(f"{self.username}:{digest}\n")
        htpasswd.chmod(0o600)
        config = self.dir / "emulator.conf"
        config.write_text(f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n")
        return config


def _answers(address: str) -> bool:
    try:
        with socket.create_connection((address, PORT), timeout=0.5):
            return True
    except OSError:
        return False


class SilentBmc:
    """A BMC address that accepts connections and never answers (see the module doc)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, PORT))
        self.sock.listen(64)  # the kernel completes handshakes; nobody reads

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> SilentBmc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
