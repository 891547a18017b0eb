"""A real kubelet node: kubelet + containerd + runc inside an nspawn fleet node, joined
to a test API server as a real Node beside the kwok ones.

Binaries: kubelet, kube-controller-manager, kube-scheduler and pause are built by
``scripts/setup.d/30-kube.sh`` from the same Go module as kube-apiserver
(``$FLEETMEDIC_CACHE_DIR/kubelet-bin-<version>-<key>/``, same key as
:func:`tests.harness.kube.build_key`); containerd 1.6 and runc are Debian's
(``scripts/setup.d/35-kubelet.apt``), bind-mounted into the node read-only.

:func:`start_control_plane` starts a :class:`~tests.harness.kube.KubeCluster` that can
run pods: ``--allow-privileged``, the ``NodeRestriction`` admission plugin, and the two
controllers a DaemonSet needs (kube-controller-manager with only the DaemonSet,
ServiceAccount, root-CA publisher, garbage-collector and namespace controllers: no
node-lifecycle controller, so no taint appears that a test did not cause;
kube-scheduler, because DaemonSet pods carry a node affinity, not a nodeName).
It is its own cluster: the shared ``kube`` fixture keeps running without them.

:class:`KubeletNode` is a ``prepare`` hook for :func:`tests.harness.fleet.start_fleet`.
It writes into the node, before its first boot: the node's client and serving
certificates (``CN=system:node:<name>``, ``O=system:nodes``), the kubelet's kubeconfig
and config, containerd's config, a CNI conflist and systemd units; it returns the
nspawn settings the kubelet needs. What each is for (all measured, FACTS.md):

- ``--capability=CAP_SYSLOG`` and ``--bind=/dev/kmsg``: the kubelet opens /dev/kmsg
  (OOM watcher); CAP_NET_ADMIN: network setup of pod sandboxes;
- ``--system-call-filter=@keyring``: runc joins a session keyring;
- own cgroups (fleet_cgroup) and a read-write remount of the v1 controllers inside the
  node: the kubelet's ``kubepods`` tree lives below the node's cgroup, not the host's;
- containerd's ``restrict_oom_score_adj``: this VM lacks CAP_SYS_RESOURCE, runc would
  fail lowering oom_score_adj;
- ``/var/lib/containerd`` bound from the node's own directory: overlayfs snapshots
  cannot live on the node's overlayfs root;
- host-wide sysctls: the kubelet wants ``kernel.panic=10``, ``kernel.panic_on_oops=1``,
  ``vm.overcommit_memory=1`` (and three more) and would write them host-wide even from
  inside nspawn. The node runs it with ``protectKernelDefaults: true`` (it never
  writes, it refuses to start on a difference) and shows it the values it wants: a
  boot unit bind-mounts small files over those /proc/sys entries inside the node only.
  :class:`HostSysctls` snapshots the host's values and restores any that changed.
- the ``kubernetes`` Service (10.96.0.1:443), which in-cluster clients use, is
  DNAT'ed in the node's network namespace to the API server on the fleet bridge: what
  kube-proxy would do; the node has no kube-proxy.

Images: every ``*.tar`` OCI archive in ``images_dir`` is imported into containerd's
``k8s.io`` namespace at each boot (``fleetmedic-images.service``), before the kubelet
starts; the sandbox image is the pause binary wrapped here by deploy/image/oci_archive.py.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.harness import procs
from tests.harness.fleet import Fleet, Node, NodeSetup
from tests.harness.kube import (
    KUBE_SRC,
    KubeCluster,
    KubeError,
    _pinned,
    build_key,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy" / "image"))
import oci_archive  # noqa: E402

SERVICE_IP = "10.96.0.1"
PAUSE_IMAGE = "fleetmedic.invalid/pause:{version}"
CONTAINERD_BINARIES = (
    "/usr/bin/containerd",
    "/usr/bin/containerd-shim-runc-v2",
    "/usr/bin/ctr",
    "/usr/sbin/runc",
)
# What the kubelet sets host-wide (pkg/kubelet/cm setupKernelTunables), and its values.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
KCM_CONTROLLERS = "daemonset,serviceaccount,root-ca-cert-publisher,garbagecollector,namespace"


@dataclass(frozen=True)
class KubeletBinaries:
    dir: Path
    kubelet: Path
    controller_manager: Path
    scheduler: Path
    pause: Path
    version: str


def find_kubelet_binaries() -> KubeletBinaries:
    """The kubelet node's binaries for the current pins, or KubeError saying how to build.
    ``FLEETMEDIC_KUBELET_BIN`` overrides the directory (refused under ``CI=true``)."""
    version = _pinned(KUBE_SRC / "go.mod", "k8s.io/kubernetes")
    files = ("kubelet", "kube-controller-manager", "kube-scheduler", "pause")
    d = procs.built_dir(
        "FLEETMEDIC_KUBELET_BIN",
        f"kubelet-bin-{version}-{build_key()}",
        files,
        KubeError,
        "bash scripts/setup.sh",
    )
    missing = [c for c in CONTAINERD_BINARIES if not Path(c).exists()]
    if missing:
        raise KubeError(
            f"kubelet node binaries missing ({', '.join(missing)}); run: bash scripts/setup.sh"
        )
    return KubeletBinaries(d, *(d / f for f in files), version)


# ---------------------------------------------------------------------------
# The control plane that runs pods.
def start_control_plane(workdir: Path, binaries: KubeletBinaries) -> KubeCluster:
    """A started cluster (no kwok) with kube-controller-manager and kube-scheduler."""
    cluster = KubeCluster(
        workdir,
        extra_args=["--allow-privileged=true", "--enable-admission-plugins=NodeRestriction"],
    )
    cluster.start(kwok=False)
    try:
        kc = cluster.kubeconfig
        cluster.spawn(
            "kube-controller-manager",
            [
                str(binaries.controller_manager),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                f"--controllers={KCM_CONTROLLERS}",
                f"--root-ca-file={cluster.ca_file}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--concurrent-daemonset-syncs=2",
                "--v=1",
            ],
        )
        cluster.spawn(
            "kube-scheduler",
            [
                str(binaries.scheduler),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--v=1",
            ],
        )
    except BaseException:
        cluster.stop(keep_logs=True)
        raise
    return cluster


# ---------------------------------------------------------------------------
# Host-wide sysctls the kubelet cares about.
class HostSysctls:
    """Snapshot of the host's values of :data:`KUBELET_SYSCTLS`; ``restore()`` writes
    back any that changed and returns them (``{name: (was, found)}``)."""

    def __init__(self) -> None:
        self.values = {k: self._read(k) for k in KUBELET_SYSCTLS}

    @staticmethod
    def _read(name: str) -> str:
        return Path("/proc/sys", name).read_text().strip()

    def changed(self) -> dict[str, tuple[str, str]]:
        return {k: (v, self._read(k)) for k, v in self.values.items() if self._read(k) != v}

    def restore(self) -> dict[str, tuple[str, str]]:
        changed = self.changed()
        for k, (was, _) in changed.items():
            Path("/proc/sys", k).write_text(was + "\n")
        return changed


# ---------------------------------------------------------------------------
# Certificates signed by the cluster's CA.
def _issue(
    pki: Path, cn: str, org: str | None, server: bool, sans: list[str]
) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    b = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if sans:
        names: list[x509.GeneralName] = []
        for s in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(s)))
            except ValueError:
                names.append(x509.DNSName(s))
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = b.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def pause_image(binaries: KubeletBinaries, out_dir: Path) -> Path:
    """The sandbox image: the pause binary as a one-layer OCI archive."""
    out = out_dir / "pause.tar"
    if out.exists():
        return out
    root = out_dir / ".pause-root"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copy2(binaries.pause, root / "pause")
    layer = oci_archive.layer(root, out_dir / ".pause-layer.tar.gz")
    oci_archive.build(
        [out_dir / ".pause-layer.tar.gz"],
        out,
        name=PAUSE_IMAGE.format(version=binaries.version),
        entrypoint=["/pause"],
        user="65535:65535",
    )
    del layer
    shutil.rmtree(root)
    for p in out_dir.glob(".pause-layer.tar.gz*"):
        p.unlink()
    return out


# ---------------------------------------------------------------------------
def _units(node: Node, address: str) -> dict[str, str]:
    prep = "\n".join(
        [
            "#!/bin/sh",
            "# fleetmedic test node: make the v1 cgroup controllers writable for the kubelet,",
            "# and show the kubelet the host-wide sysctls it wants without writing them.",
            "set -eu",
            "for d in /sys/fs/cgroup/*/; do",
            '  [ "$(stat -fc %T "$d")" = cgroupfs ] || continue',
            '  case "$d" in */systemd/|*/unified/) continue ;; esac',
            '  mount -o remount,bind,rw "$d"',
            "done",
            "mkdir -p /run/fleetmedic-sysctl",
            *[
                f'if [ "$(cat /proc/sys/{k})" != {v} ]; then '
                f"echo {v} > /run/fleetmedic-sysctl/{k.replace('/', '.')}; "
                f"mount --bind /run/fleetmedic-sysctl/{k.replace('/', '.')} /proc/sys/{k}; fi"
                for k, v in KUBELET_SYSCTLS.items()
            ],
            "",
        ]
    )
    return {
        "usr/local/sbin/fleetmedic-kubelet-prep": prep,
        "etc/systemd/system/fleetmedic-kubelet-prep.service": (
            "[Unit]\nDescription=fleetmedic test node: cgroups and sysctls for the kubelet\n"
            "DefaultDependencies=no\nBefore=containerd.service kubelet.service\n"
            "After=local-fs.target\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            "ExecStart=/usr/local/sbin/fleetmedic-kubelet-prep\n\n"
            "[Install]\nWantedBy=multi-user.target\n"
        ),
        "etc/systemd/system/containerd.service": (
            "[Unit]\nDescription=containerd (Debian's, bound from the host)\n"
            "After=network.target fleetmedic-kubelet-prep.service\n"
            "Requires=fleetmedic-kubelet-prep.service\n\n"
            "[Service]\nType=notify\n"
            "ExecStart=/usr/bin/containerd --config /etc/containerd/config.toml\n"
            "Delegate=yes\nKillMode=process\nRestart=always\nRestartSec=1\n\n"
            "[Install]\nWantedBy=multi-user.target\n"
        ),
        "etc/systemd/system/fleetmedic-images.service": (
            "[Unit]\nDescription=fleetmedic test node: import the OCI archives "
            "in /opt/fleetmedic-images\n"
            "After=containerd.service\nRequires=containerd.service\nBefore=kubelet.service\n\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            "ExecStart=/bin/sh -c 'for f in /opt/fleetmedic-images/*.tar; do "
            '[ -e "$f" ] && ctr -n k8s.io images import --all-platforms "$f"; done; true\'\n\n'
            "[Install]\nWantedBy=multi-user.target\n"
        ),
        "etc/systemd/system/kubelet.service": (
            "[Unit]\nDescription=kubelet\nAfter=containerd.service fleetmedic-images.service\n"
            "Wants=containerd.service fleetmedic-images.service\n\n"
            "[Service]\nExecStart=/opt/kubernetes/bin/kubelet "
            "--config=/etc/kubernetes/kubelet.yaml "
            f"--kubeconfig=/etc/kubernetes/kubelet.kubeconfig --hostname-override={node.name} "
            f"--node-ip={address} --v=2\n"
            "Restart=always\nRestartSec=1\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
    }


def _containerd_config(pause: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""# fleetmedic test node (tests/harness/kubelet.py): containerd 1.6 for the kubelet
version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[{cri}]
  sandbox_image = "{pause}"
  # runc cannot lower oom_score_adj here (no CAP_SYS_RESOURCE in this VM)
  restrict_oom_score_adj = true
  disable_apparmor = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [{cri}.cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
"""


# A pod network is never set up: every pod here uses the host network. The kubelet
# reports the node Ready only once the runtime has loaded a CNI config, though.
CNI_CONFLIST = {
    "cniVersion": "1.0.0",
    "name": "fleetmedic-test",
    "plugins": [
        {
            "type": "bridge",
            "bridge": "cni0",
            "isGateway": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]]},
        }
    ],
}


def _kubelet_config(address: str) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This machine has cgroup v1 only; kubelet 1.37 refuses it unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": "/etc/kubernetes/pki/kubelet.crt",
        "tlsPrivateKeyFile": "/etc/kubernetes/pki/kubelet.key",
        "address": address,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        # Never write host-wide sysctls; the node shows the wanted values (see above).
        "protectKernelDefaults": True,
        "failSwapOn": False,
        "resolvConf": "/etc/resolv.conf",
        # The test images are imported, never pulled: never garbage-collect them, and
        # never evict on a shared, busy test machine.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "kernelMemcgNotification": False,
        "serializeImagePulls": False,
        # Status at most every 10 s (the default), but every change at once.
        "nodeStatusReportFrequency": "1m",
    }


class KubeletNode:
    """``start_fleet(1, prepare=KubeletNode(cluster, binaries, images_dir))``."""

    def __init__(self, cluster: KubeCluster, binaries: KubeletBinaries, images_dir: Path) -> None:
        self.cluster = cluster
        self.bin = binaries
        self.images_dir = images_dir
        pause_image(binaries, images_dir)

    def __call__(self, fleet: Fleet, node: Node) -> NodeSetup:
        r = node.dir / "root"
        pki = r / "etc/kubernetes/pki"
        pki.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.cluster.ca_file, pki / "ca.crt")
        ident = f"system:node:{node.name}"
        crt, key = _issue(self.cluster.pki, ident, "system:nodes", False, [])
        (pki / "kubelet-client.crt").write_bytes(crt)
        (pki / "kubelet-client.key").write_bytes(key)
        crt, key = _issue(self.cluster.pki, ident, None, True, [node.address, node.name])
        (pki / "kubelet.crt").write_bytes(crt)
        (pki / "kubelet.key").write_bytes(key)
        for f in pki.glob("*.key"):
            f.chmod(0o600)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {
                        "server": self.cluster.server_url(fleet.host_address),
                        "certificate-authority": "/etc/kubernetes/pki/ca.crt",
                    },
                }
            ],
            "users": [
                {
                    "name": ident,
                    "user": {
                        "client-certificate": "/etc/kubernetes/pki/kubelet-client.crt",
                        "client-key": "/etc/kubernetes/pki/kubelet-client.key",
                    },
                }
            ],
            "contexts": [{"name": "kubelet", "context": {"cluster": "test", "user": ident}}],
            "current-context": "kubelet",
        }
        (r / "etc/kubernetes/kubelet.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        (r / "etc/kubernetes/kubelet.yaml").write_text(
            yaml.safe_dump(_kubelet_config(node.address), sort_keys=False)
        )
        (r / "etc/containerd").mkdir(parents=True, exist_ok=True)
        (r / "etc/containerd/config.toml").write_text(
            _containerd_config(PAUSE_IMAGE.format(version=self.bin.version))
        )
        (r / "etc/cni/net.d").mkdir(parents=True, exist_ok=True)
        (r / "etc/cni/net.d/10-fleetmedic-test.conflist").write_text(json.dumps(CNI_CONFLIST))
        wants = r / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        for rel, text in _units(node, node.address).items():
            (r / rel).parent.mkdir(parents=True, exist_ok=True)
            (r / rel).write_text(text)
            if rel.endswith(".service"):
                link = wants / Path(rel).name
                link.unlink(missing_ok=True)
                link.symlink_to(f"/{rel}")
        (r / "usr/local/sbin/fleetmedic-kubelet-prep").chmod(0o755)
        for d in ("opt/kubernetes/bin", "opt/fleetmedic-images", "var/lib/containerd"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for b in CONTAINERD_BINARIES:
            (r / b.lstrip("/")).touch()  # bind-mount targets
        state = node.dir / "containerd"
        state.mkdir(exist_ok=True)
        self._service_dnat(fleet, node)
        return NodeSetup(
            nspawn_args=[
                "--capability=CAP_SYSLOG,CAP_NET_ADMIN",
                "--system-call-filter=@keyring",
                "--bind=/dev/kmsg",
                f"--bind-ro={self.bin.dir}:/opt/kubernetes/bin",
                f"--bind-ro={self.images_dir}:/opt/fleetmedic-images",
                f"--bind={state}:/var/lib/containerd",
                *[f"--bind-ro={b}" for b in CONTAINERD_BINARIES],
            ],
            own_cgroup=True,
        )

    def _service_dnat(self, fleet: Fleet, node: Node) -> None:
        """What kube-proxy does for the ``kubernetes`` Service, in the node's netns."""
        cmd = [
            "ip", "netns", "exec", node.netns, "iptables", "-w", "-t", "nat", "-A", "OUTPUT",
            "-d", f"{SERVICE_IP}/32", "-p", "tcp", "--dport", "443", "-j", "DNAT",
            "--to-destination", f"{fleet.host_address}:{self.cluster.port}",
        ]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise KubeError(f"service DNAT in {node.netns}: {p.stderr.strip() or p.returncode}")


def wait_node_ready(cluster: KubeCluster, name: str, timeout: float = 120.0) -> dict:
    """The Node once its Ready condition is True; KubeError with its conditions if not."""
    deadline = time.monotonic() + timeout
    node: dict = {}
    while time.monotonic() < deadline:
        node = cluster.request("GET", f"/api/v1/nodes/{name}", ok=(404,))
        if node.get("kind") != "Node":
            node = {}
        conds = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
        if conds.get("Ready", {}).get("status") == "True":
            return node
        time.sleep(0.5)
    conds = (node.get("status") or {}).get("conditions") or []
    why = "; ".join(f"{c['type']}={c['status']} {c.get('message', '')}" for c in conds)
    raise KubeError(f"node {name} not Ready after {timeout:.0f}s ({why or 'not registered'})")
