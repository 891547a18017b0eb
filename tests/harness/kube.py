"""A real Kubernetes control plane for tests: etcd + kube-apiserver (+ kwok).

The binaries are built from Go modules by ``scripts/setup.d/30-kube.sh`` (pins in
``tests/kube``) into ``$FLEETMEDIC_CACHE_DIR/kube-bin-<version>-<key>/``; this module
finds them by computing the same key. :class:`KubeCluster` runs them on loopback:

- etcd (an in-process ``embed`` etcd, no TLS, no fsync) on 127.0.0.1;
- kube-apiserver with generated certificates, RBAC (``Node,RBAC``), ServiceAccount
  token issuing, bound to 0.0.0.0 so nspawn fleet nodes can reach it at their bridge's
  host address (the serving cert names 127.0.0.1 and 192.168.240-254.1);
- kwok, which plays the kubelet for Nodes annotated ``kwok.x-k8s.io/node=fake`` and
  pods bound to them (it marks them Ready/Running and completes pod deletions).

There is no kube-controller-manager, on purpose: the semantics fleetmedic depends on
(taint patches, resourceVersion preconditions, watches, eviction against a PDB, RBAC)
all live in the API server. A controller-manager would add node-lifecycle taints of its
own and evict pods from nodes it thinks are dead, which makes taint tests racy. What it
would have done, tests do explicitly: :meth:`KubeCluster.set_pdb_status` writes a PDB's
status as the disruption controller would, and :meth:`KubeCluster.ensure_namespace`
creates the ``default`` ServiceAccount. Known gaps: namespaces never finish deleting and
there is no garbage collection; delete objects explicitly.

Run ``python -m tests.harness.kube`` for a cluster in the foreground (prints the admin
kubeconfig path; Ctrl-C stops it).
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness import pki, procs

ROOT = Path(__file__).resolve().parents[2]
KUBE_SRC = ROOT / "tests" / "kube"
# Keep in sync with scripts/setup.d/30-kube.sh: the files that define the build.
KEY_FILES = (
    "go.mod",
    "go.sum",
    "cmd/etcd/main.go",
    "cmd/etcd/version.go",
    "kwok/go.mod",
    "kwok/go.sum",
    "kwok/stages/pod-delete-at-grace-end.yaml",
)
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FLEET_HOST_ADDRESSES = [f"192.168.{n}.1" for n in range(240, 255)]
SERVICE_CIDR = "10.96.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


class KubeError(RuntimeError):
    """The test control plane could not be built, found or started. One line."""


# ---------------------------------------------------------------------------
# The API server's flags, in one place, with the reason for each.
def apiserver_flags(c: KubeCluster) -> list[str]:
    p = c.pki
    return [
        f"--etcd-servers={c.etcd_url}",
        # Reachable from nspawn fleet nodes via their bridge's host address (.1);
        # the bridges come and go, so bind the wildcard rather than a list.
        f"--bind-address={c.bind_address}",
        f"--secure-port={c.port}",
        # Only used for the built-in `kubernetes` Service; loopback is fine with
        # the endpoint reconciler off (Endpoints may not point at 127.0.0.0/8).
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Serving cert signed by our CA, SANs incl. 127.0.0.1 and 192.168.240-254.1.
        f"--tls-cert-file={p / 'apiserver.crt'}",
        f"--tls-private-key-file={p / 'apiserver.key'}",
        # Admin authenticates with a client cert (O=system:masters) from this CA.
        f"--client-ca-file={p / 'ca.crt'}",
        # The real authorizers: RBAC decides what our shipped roles may do (403s).
        "--authorization-mode=Node,RBAC",
        # ServiceAccount tokens (TokenRequest API) so tests run as a given SA.
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={p / 'sa.pub'}",
        f"--service-account-signing-key-file={p / 'sa.key'}",
        # TaintNodesByCondition puts node.kubernetes.io/not-ready:NoSchedule on every
        # new Node; the controller-manager's node-lifecycle controller removes it once
        # the node is Ready. We run none, so it would stay forever. Off, nodes look
        # like a real cluster's steady state; tests add such taints when they mean it.
        "--disable-admission-plugins=TaintNodesByCondition",
        # On SIGTERM, close open watches (kwok's, tests') instead of waiting for
        # them: without this a stop or restart hangs until our 15 s SIGKILL.
        "--shutdown-watch-termination-grace-period=3s",
        "--profiling=false",
        # The API server writes nothing else to disk; keep its stray files here.
        f"--cert-dir={c.workdir / 'apiserver-certs'}",
        "--v=1",
        *c.extra_args,
    ]


def kwok_flags(c: KubeCluster) -> list[str]:
    return [
        f"--kubeconfig={c.kubeconfig}",
        f"--config={c.workdir / 'kwok.yaml'}",
        # Only nodes we mark, so tests can still create plain (unmanaged) Nodes.
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
        # Node Leases off: nothing here reads them (no controller-manager), and 5,000
        # nodes renewing every 10 s would be 500 writes/s on a 2-core machine.
        "--node-lease-duration-seconds=0",
        # Pod IPs for many nodes' pods; default node IP for nodes given none.
        "--cidr=10.128.0.0/12",
        "--node-ip=10.127.0.1",
        # kwok's kubelet-ish server (logs/exec): loopback, own port per cluster.
        f"--server-address=127.0.0.1:{c.kwok_port}",
    ]


# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Binaries:
    dir: Path
    apiserver: Path
    etcd: Path
    kwok: Path
    kwok_stages: Path
    versions: dict[str, str]


def build_key() -> str:
    """sha256 over KEY_FILES, the same as `sha256sum FILES | sha256sum` in setup."""
    return procs.cache_key(KUBE_SRC, KEY_FILES)


def _pinned(gomod: Path, module: str) -> str:
    version = procs.pinned(gomod, module)
    if version is None:
        raise KubeError(f"{module} is not pinned in {gomod}")
    return version


def find_binaries() -> Binaries:
    """The built binaries for the current pins, or KubeError saying how to build them.
    ``FLEETMEDIC_KUBE_BIN`` overrides the directory (refused under ``CI=true``)."""
    version = _pinned(KUBE_SRC / "go.mod", "k8s.io/kubernetes")
    files = ("kube-apiserver", "etcd", "kwok", "kwok-stages.yaml")
    d = procs.built_dir(
        "FLEETMEDIC_KUBE_BIN",
        f"kube-bin-{version}-{build_key()}",
        files,
        KubeError,
        "bash scripts/setup.d/30-kube.sh",
    )
    return Binaries(d, *(d / f for f in files), procs.read_versions(d))


# ---------------------------------------------------------------------------
# Certificates (python `cryptography`, an ansible-core dependency).
def _write_pki(d: Path, extra_sans: Iterable[str] = ()) -> None:
    from cryptography import x509

    d.mkdir(parents=True, exist_ok=True)
    ca = pki.Ca("fleetmedic-test-ca")
    ips = [
        "127.0.0.1",
        "::1",
        str(next(ipaddress.ip_network(SERVICE_CIDR).hosts())),
        *FLEET_HOST_ADDRESSES,
    ]
    dns = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    for s in [*ips, *extra_sans]:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(s)))
        except ValueError:
            sans.append(x509.DNSName(s))
    crt, key = ca.issue("kube-apiserver", server=True, sans=sans)
    (d / "apiserver.crt").write_bytes(crt)
    pki.write_private(d / "apiserver.key", key)
    crt, key = ca.issue("fleetmedic-test-admin", org="system:masters", client=True)
    (d / "admin.crt").write_bytes(crt)
    pki.write_private(d / "admin.key", key)
    (d / "ca.crt").write_bytes(ca.cert_pem)
    pki.write_private(d / "ca.key", ca.key_pem)
    private, public = pki.rsa_pair()
    pki.write_private(d / "sa.key", private)
    (d / "sa.pub").write_bytes(public)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        try:
            msg = json.loads(body).get("message", body)
        except ValueError:
            msg = body
        super().__init__(f"{method} {path}: HTTP {status}: {msg[:300]}")
        self.status = status


# ---------------------------------------------------------------------------
class KubeCluster:
    """etcd + kube-apiserver (+ kwok) in a temp dir. ``start()`` / ``stop()``.

    ``os.fspath(cluster)`` is the admin kubeconfig path.
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        bind_address: str = "0.0.0.0",
        extra_args: Sequence[str] = (),
        extra_sans: Sequence[str] = (),
        start_timeout: float = 90.0,
        binaries: Binaries | None = None,
    ) -> None:
        self.bin = binaries or find_binaries()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fleetmedic-kube-"))
        self.pki = self.workdir / "pki"
        self.bind_address = bind_address
        self.extra_args = list(extra_args)
        self.extra_sans = list(extra_sans)
        self.start_timeout = start_timeout
        self.port = 0
        self.etcd_url = ""
        self.kwok_port = 0
        self.kubeconfig_path = self.workdir / "admin.kubeconfig"
        self.procs: dict[str, subprocess.Popen] = {}
        self.spawned: list[int] = []  # every pid ever started (for leak checks)
        self.start_seconds: float | None = None
        self._local = threading.local()
        self._sa_seq = 0

    # -- lifecycle ----------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> str:
        """Admin kubeconfig path (a str: the kubernetes client wants one)."""
        return str(self.kubeconfig_path)

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    def __fspath__(self) -> str:
        return self.kubeconfig

    def __enter__(self) -> KubeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        out = open(self.log(name), "ab")
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.workdir,
                preexec_fn=procs.die_with_parent,
            )
        finally:
            out.close()
        self.procs[name] = proc
        self.spawned.append(proc.pid)
        return proc

    def start(self, kwok: bool = True) -> KubeCluster:
        """Start etcd, kube-apiserver (wait for /readyz) and optionally kwok."""
        t0 = time.monotonic()
        if not (self.pki / "ca.crt").exists():
            _write_pki(self.pki, self.extra_sans)
        try:
            for attempt in range(3):  # a port we picked may be taken meanwhile
                self.port, etcd_client, etcd_peer = (
                    procs.free_port(),
                    procs.free_port(),
                    procs.free_port(),
                )
                self.etcd_url = f"http://127.0.0.1:{etcd_client}"
                self._spawn(
                    "etcd",
                    [
                        str(self.bin.etcd),
                        f"--data-dir={self.workdir / 'etcd'}",
                        f"--listen-client-url={self.etcd_url}",
                        f"--listen-peer-url=http://127.0.0.1:{etcd_peer}",
                    ],
                )
                self._write_kubeconfig(
                    self.kubeconfig_path,
                    {
                        "client-certificate-data": _b64(self.pki / "admin.crt"),
                        "client-key-data": _b64(self.pki / "admin.key"),
                    },
                    user="admin",
                )
                self._spawn("kube-apiserver", [str(self.bin.apiserver), *apiserver_flags(self)])
                try:
                    self._wait_ready(t0)
                    break
                except KubeError:
                    if attempt < 2 and any(
                        "address already in use" in self.log(n).read_text(errors="replace")
                        for n in ("etcd", "kube-apiserver")
                    ):
                        self._stop_procs()
                        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
                        continue
                    raise
            self.start_seconds = time.monotonic() - t0
            if kwok:
                self.start_kwok()
        except BaseException:
            self._stop_procs()
            raise
        return self

    def _wait_ready(self, t0: float) -> None:
        deadline = t0 + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            for name in ("etcd", "kube-apiserver"):
                rc = self.procs[name].poll()
                if rc is not None:
                    raise KubeError(
                        f"{name} exited with code {rc} during start: "
                        f"{procs.last_line(self.log(name))} (log: {self.log(name)})"
                    )
            try:
                status, body = self._raw("GET", "/readyz", timeout=5)
                if status == 200:
                    return
                last = (
                    f"readyz {status}: "
                    + " ".join(
                        ln for ln in body.decode(errors="replace").splitlines() if "failed" in ln
                    )[:200]
                )
            except (OSError, http.client.HTTPException) as exc:
                last = type(exc).__name__
            self._local.__dict__.pop("conn", None)
            time.sleep(0.2)
        raise KubeError(
            f"kube-apiserver not ready after {self.start_timeout:.0f}s ({last}); "
            f"log: {self.log('kube-apiserver')}"
        )

    def restart_apiserver(self) -> float:
        """Stop and start kube-apiserver on the same port (etcd and kwok keep
        running), as in an upgrade or a crash. Its watch cache starts afresh, so
        watches resumed from before the restart get 410 Gone. Returns seconds taken."""
        t0 = time.monotonic()
        self._stop_one("kube-apiserver")
        self._local = threading.local()
        self._spawn("kube-apiserver", [str(self.bin.apiserver), *apiserver_flags(self)])
        self._wait_ready(t0)
        return time.monotonic() - t0

    def start_kwok(self, heartbeat: bool = False) -> None:
        """Start kwok. ``heartbeat`` adds kwok's node-heartbeat stage (a status
        update per node every 20-45 s), off by default to keep watches quiet."""
        if "kwok" in self.procs and self.procs["kwok"].poll() is None:
            return
        stages = self.bin.kwok_stages.read_text()
        if heartbeat:
            stages += "\n---\n" + (self.bin.dir / "kwok-stage-heartbeat.yaml").read_text()
        (self.workdir / "kwok.yaml").write_text(stages)
        self.kwok_port = procs.free_port()
        proc = self._spawn("kwok", [str(self.bin.kwok), *kwok_flags(self)])
        # kwok has no readiness endpoint we can rely on; its server answers once the
        # controllers have started.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise KubeError(
                    f"kwok exited with code {proc.returncode}: "
                    f"{procs.last_line(self.log('kwok'))} (log: {self.log('kwok')})"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.kwok_port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise KubeError(f"kwok did not come up in 30s; log: {self.log('kwok')}")

    def stop(self, keep_logs: bool = False) -> None:
        """Stop everything (kwok, apiserver, then etcd) and remove the workdir, or
        with ``keep_logs`` everything but the ``*.log`` files."""
        self._stop_procs()
        if not keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)
            return
        for p in self.workdir.iterdir():
            if p.suffix != ".log":
                shutil.rmtree(p) if p.is_dir() else p.unlink()

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        """Run another component of the cluster (e.g. kube-controller-manager): logged to
        ``<workdir>/<name>.log``, killed with the test process, stopped first by ``stop``."""
        return self._spawn(name, argv)

    def _stop_procs(self) -> None:
        base = ("kwok", "kube-apiserver", "etcd")
        for name in [*reversed([n for n in self.procs if n not in base]), *base]:
            self._stop_one(name)
        self._local = threading.local()

    def _stop_one(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # Anything left in its process group (there should be none).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.procs.items() if p.poll() is None}

    def rss(self) -> dict[str, int]:
        """Resident memory in bytes of each running component (VmRSS)."""
        out = {}
        for name, pid in self.pids().items():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[name] = int(line.split()[1]) * 1024
            except OSError:
                pass
        return out

    def request_counts(self, resource: str, subresource: str = "") -> dict[str, int]:
        """Requests the API server has served for ``resource`` (``subresource``), by verb
        (GET, LIST, WATCH, POST, ...), summed over its ``apiserver_request_total`` metric:
        what a test reads to bound the API calls some code makes."""
        status, data = self._raw("GET", "/metrics")
        if status != 200:
            raise ApiError(status, "GET", "/metrics", data.decode(errors="replace"))
        counts: dict[str, int] = {}
        for line in data.decode().splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line[len("apiserver_request_total{") :].rpartition("} ")
            labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
            if (labels.get("resource"), labels.get("subresource", "")) == (resource, subresource):
                verb = labels.get("verb", "")
                counts[verb] = counts.get(verb, 0) + int(float(value))
        return counts

    # -- kubeconfigs --------------------------------------------------------
    def _write_kubeconfig(
        self, path: Path, user_fields: dict, user: str, server: str | None = None
    ) -> Path:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [
                {
                    "name": "fleetmedic-test",
                    "cluster": {
                        "server": server or self.url,
                        "certificate-authority-data": _b64(self.ca_file),
                    },
                }
            ],
            "users": [{"name": user, "user": user_fields}],
            "contexts": [{"name": user, "context": {"cluster": "fleetmedic-test", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)
        return path

    def server_url(self, host: str = "127.0.0.1") -> str:
        """The API URL as seen from ``host``'s side, e.g. a fleet bridge's .1 address."""
        return f"https://{host}:{self.port}"

    def kubeconfig_for_serviceaccount(
        self,
        namespace: str,
        name: str,
        *,
        expiration_seconds: int = 86400,
        server: str | None = None,
    ) -> str:
        """Mint a token for ServiceAccount ``namespace/name`` (created if missing)
        with the TokenRequest API and write a kubeconfig using it. Returns its path.
        ``server`` overrides the URL (see :meth:`server_url`)."""
        self.ensure_namespace(namespace)
        self.ensure(
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        )
        tr = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": expiration_seconds},
            },
        )
        self._sa_seq += 1
        path = self.workdir / f"sa-{namespace}-{name}-{self._sa_seq}.kubeconfig"
        return str(
            self._write_kubeconfig(
                path, {"token": tr["status"]["token"]}, user=f"{namespace}-{name}", server=server
            )
        )

    # -- a tiny REST client (admin) for the harness itself -------------------
    def _conn(self, timeout: float) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
            ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 30,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):
            conn = self._conn(timeout)
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, ConnectionError, ssl.SSLError):
                # a kept-alive connection the server closed meanwhile: one fresh try
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float = 30,
        content_type: str = "application/json",
        ok: Sequence[int] = (),
    ) -> dict:
        """JSON request as admin; raises :class:`ApiError` unless 2xx or in ``ok``."""
        status, data = self._raw(method, path, body, timeout, content_type)
        if not (200 <= status < 300 or status in ok):
            raise ApiError(status, method, path, data.decode(errors="replace"))
        return json.loads(data) if data else {}

    def ensure(self, collection: str, obj: dict) -> dict:
        """Create ``obj`` under ``collection`` unless it already exists."""
        return self.request("POST", collection, obj, ok=(409,))

    def ensure_namespace(self, namespace: str) -> None:
        """The namespace and its ``default`` ServiceAccount (no controller-manager
        creates it, and pods need it)."""
        self.ensure(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        self.ensure(
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )

    # -- nodes and pods -----------------------------------------------------
    def make_nodes(
        self,
        names: int | Sequence[str],
        *,
        prefix: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        addresses: Sequence[str] | Mapping[str, str] | None = None,
        unschedulable: bool = False,
        kwok: bool = True,
        wait: bool = True,
        timeout: float | None = None,
        workers: int = 8,
    ) -> list[dict]:
        """Create Nodes and return them (as the API returns them, after kwok made
        them Ready when ``wait``).

        ``names``: a list of names, or a count (names ``<prefix>-0..N-1``, with a
        random prefix when none is given). ``addresses``: InternalIP per node, a list
        aligned with the names or a name->IP mapping (e.g. the SSH fleet's node
        addresses). ``kwok=False`` makes a Node no kubelet manages (stays NotReady).
        """
        if isinstance(names, int):
            prefix = prefix or f"node-{uuid.uuid4().hex[:6]}"
            names = [f"{prefix}-{i}" for i in range(names)]
        names = list(names)
        if addresses is not None and not isinstance(addresses, Mapping):
            if len(addresses) != len(names):
                raise ValueError(f"{len(addresses)} addresses for {len(names)} nodes")
            addresses = dict(zip(names, addresses, strict=True))

        def body(name: str) -> dict:
            ann = dict(annotations or {})
            lab = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            }
            if kwok:
                ann[KWOK_NODE_ANNOTATION] = "fake"
                lab.setdefault("type", "kwok")
            node: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": lab, "annotations": ann},
                "spec": {"taints": [dict(t) for t in taints], "unschedulable": unschedulable},
            }
            addrs = [{"type": "Hostname", "address": name}]
            if addresses and name in addresses:
                addrs.insert(0, {"type": "InternalIP", "address": addresses[name]})
            node["status"] = {"addresses": addrs}
            return node

        self._parallel(lambda n: self.request("POST", "/api/v1/nodes", body(n)), names, workers)
        if not wait or not kwok:
            return [self.request("GET", f"/api/v1/nodes/{n}") for n in names]
        timeout = timeout or 60 + len(names) * 0.05
        return self._wait_for(
            f"{len(names)} nodes Ready", "/api/v1/nodes", names, _node_ready, timeout
        )

    def delete_nodes(self, names: Iterable[str], workers: int = 8) -> None:
        self._parallel(
            lambda n: self.request("DELETE", f"/api/v1/nodes/{n}", ok=(404,)), list(names), workers
        )

    def make_pods(
        self,
        node: str,
        count: int = 1,
        *,
        namespace: str = "default",
        prefix: str | None = None,
        labels: Mapping[str, str] | None = None,
        owner_kind: str | None = "ReplicaSet",
        annotations: Mapping[str, str] | None = None,
        spec: Mapping[str, Any] | None = None,
        wait: bool = True,
        timeout: float = 60,
        workers: int = 8,
    ) -> list[dict]:
        """Create ``count`` pods bound to ``node`` (spec.nodeName, no scheduler) and,
        when ``wait``, wait until kwok reports them Running and Ready.
        ``owner_kind`` adds a controller ownerReference, which drain logic looks at: a
        ReplicaSet by default, as most workloads have; None makes pods that declare no
        controller (``kubectl drain`` refuses those without ``--force``). ``spec`` is
        merged over the pod spec (volumes, containers, terminationGracePeriodSeconds);
        the annotation ``fleetmedic.test/ignores-sigterm: "true"`` makes kwok keep a
        deleted pod Terminating for its whole grace period (tests/kube/kwok/stages)."""
        self.ensure_namespace(namespace)
        prefix = prefix or f"{node}-pod-{uuid.uuid4().hex[:4]}"
        names = [f"{prefix}-{i}" for i in range(count)]

        def body(name: str) -> dict:
            meta: dict[str, Any] = {"name": name, "labels": dict(labels or {"app": prefix})}
            if annotations:
                meta["annotations"] = dict(annotations)
            if owner_kind:
                meta["ownerReferences"] = [
                    {
                        "apiVersion": "apps/v1",
                        "kind": owner_kind,
                        "name": f"{prefix}-owner",
                        "uid": str(uuid.uuid4()),
                        "controller": True,
                    }
                ]
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": {
                    "nodeName": node,
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 30,
                    "containers": [
                        {"name": "main", "image": "registry.invalid/fleetmedic/pause:1"}
                    ],
                    # Tolerate everything, as kubelet-managed workloads often do; a
                    # drain must still evict them.
                    "tolerations": [{"operator": "Exists"}],
                    **(spec or {}),
                },
            }

        base = f"/api/v1/namespaces/{namespace}/pods"
        self._parallel(lambda n: self.request("POST", base, body(n)), names, workers)
        if not wait:
            return [self.request("GET", f"{base}/{n}") for n in names]
        return self._wait_for(
            f"{count} pods Running on {node}",
            base,
            names,
            _pod_ready,
            timeout,
            query=f"?fieldSelector=spec.nodeName%3D{node}",
        )

    def set_pdb_status(self, namespace: str, name: str, disruptions_allowed: int) -> dict:
        """Write a PodDisruptionBudget's status as the disruption controller would
        (observedGeneration current, disruptionsAllowed as given). Eviction in the
        API server reads exactly these fields."""
        path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"
        pdb = self.request("GET", path)
        expected = int(pdb.get("status", {}).get("expectedPods") or 0)
        pdb["status"] = {
            "observedGeneration": pdb["metadata"]["generation"],
            "disruptionsAllowed": disruptions_allowed,
            "currentHealthy": max(expected, disruptions_allowed),
            "desiredHealthy": max(expected, disruptions_allowed) - disruptions_allowed,
            "expectedPods": max(expected, disruptions_allowed),
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "status": "True" if disruptions_allowed > 0 else "False",
                    "reason": "SufficientPods" if disruptions_allowed > 0 else "InsufficientPods",
                    "message": "",
                    "observedGeneration": pdb["metadata"]["generation"],
                    "lastTransitionTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            ],
        }
        return self.request("PUT", f"{path}/status", pdb)

    # -- helpers -------------------------------------------------------------
    def _parallel(self, fn, items: list, workers: int) -> list:
        if len(items) <= 1 or workers <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
            return list(pool.map(fn, items))

    def _wait_for(
        self, what: str, collection: str, names: list[str], ready, timeout: float, query: str = ""
    ) -> list[dict]:
        want = set(names)
        deadline = time.monotonic() + timeout
        pause = 0.1 if len(names) < 100 else 1.0
        while True:
            items = self.request("GET", collection + query, timeout=120)["items"]
            got = {o["metadata"]["name"]: o for o in items if o["metadata"]["name"] in want}
            if len(got) == len(want) and all(ready(o) for o in got.values()):
                return [got[n] for n in names]
            if time.monotonic() > deadline:
                done = sum(1 for o in got.values() if ready(o))
                kw = self.procs.get("kwok")
                hint = "" if kw and kw.poll() is None else " (kwok is not running)"
                raise KubeError(
                    f"timed out after {timeout:.0f}s waiting for {what}: "
                    f"{done}/{len(want)} ready{hint}; kwok log: {self.log('kwok')}"
                )
            time.sleep(pause)


def _cond(obj: dict, type_: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c.get("status")
    return None


def _node_ready(node: dict) -> bool:
    return _cond(node, "Ready") == "True"


def _pod_ready(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and _cond(pod, "Ready") == "True"


def main() -> None:  # pragma: no cover - manual use
    import argparse

    ap = argparse.ArgumentParser(description="Run the test control plane in the foreground.")
    ap.add_argument("--nodes", type=int, default=0, help="kwok nodes to create")
    args = ap.parse_args()
    with KubeCluster() as c:
        if args.nodes:
            c.make_nodes(args.nodes, prefix="kwok")
        print(f"ready in {c.start_seconds:.1f}s; export KUBECONFIG={c.kubeconfig}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
