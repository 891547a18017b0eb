"""The agent's test environment: helpers for its integration tests (tests/integration/
test_agent_*.py) and bench/xid_to_taint.py.

- :func:`install_agent_rbac`: applies deploy/agent (namespace, RBAC, admission
  policies, ConfigMap) to the test API server, exactly as shipped.
- :func:`agent_kubeconfig`: the agent's real identity on one node: a Pod of the
  ServiceAccount bound to that Node and a TokenRequest token bound to the Pod
  (``boundObjectRef``), so the API server puts the node name into the token's user
  info, as for the DaemonSet's projected token.
- :class:`AgentProcess`: ``fleetmedic agent`` as a child process (optionally inside
  a fleet node's network namespace), stopped with SIGTERM like a DaemonSet pod.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.harness import manifests as shipped
from tests.harness import procs
from tests.harness.loadscale import Deadline

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "agent"
FAKES = ROOT / "tests" / "fakes" / "build"
NAMESPACE = "fleetmedic"
SA = "fleetmedic-agent"
FLEETMEDIC = Path(sys.executable).parent / "fleetmedic"


def manifests() -> list[dict]:
    return shipped.load(DEPLOY)


def install_agent_rbac(kube) -> None:
    """deploy/agent as shipped, but the DaemonSet (idempotent; the API server is shared by
    the session). The test API server runs without --allow-privileged, so the DaemonSet is
    only validated (test_agent_kube.py); no controller-manager would run it anyway."""
    kube.ensure_namespace("default")
    for doc in manifests():
        if doc["kind"] != "DaemonSet":
            shipped.apply(kube, doc)


def pod_name(node: str) -> str:
    return f"{SA}-{node}"[:63].rstrip("-.")


def agent_kubeconfig(
    kube, node: str, path: Path, *, server: str | None = None, expiration: int = 7200
) -> Path:
    """A kubeconfig whose token is the agent's, bound to a Pod on ``node``."""
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    name = pod_name(node)
    kube.request("DELETE", f"{pods}/{name}?gracePeriodSeconds=0", ok=(404,))
    deadline = time.monotonic() + 30
    while True:
        created = kube.request(
            "POST",
            pods,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": SA}},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": SA,
                    "automountServiceAccountToken": False,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agent", "image": "registry.invalid/fleetmedic:test"}],
                },
            },
            ok=(409,),
        )
        if created.get("kind") == "Pod":
            break
        if time.monotonic() > deadline:  # the old one is still terminating
            raise RuntimeError(f"pod {name} did not go away: {created.get('message')}")
        time.sleep(0.2)
    token = bound_token(kube, created, expiration)
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {
                    "server": server or kube.url,
                    "certificate-authority-data": base64.b64encode(
                        kube.ca_file.read_bytes()
                    ).decode(),
                },
            }
        ],
        "users": [{"name": SA, "user": {"token": token}}],
        "contexts": [{"name": SA, "context": {"cluster": "test", "user": SA}}],
        "current-context": SA,
    }
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path


def bound_token(kube, pod: dict, expiration: int = 7200) -> str:
    meta = pod["metadata"]
    tr = kube.request(
        "POST",
        f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/"
        f"{pod['spec']['serviceAccountName']}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": expiration,
                "boundObjectRef": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        },
    )
    return tr["status"]["token"]


def remove_nodes(kube, names: Sequence[str]) -> None:
    """Delete test Nodes and their agent Pods (the API server is shared by the session)."""
    for name in names:
        kube.request(
            "DELETE",
            f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name(name)}?gracePeriodSeconds=0",
            ok=(404,),
        )
    kube.delete_nodes(names)


# -- reading nodes ----------------------------------------------------------------------
def get_node(kube, name: str) -> dict:
    return kube.request("GET", f"/api/v1/nodes/{name}")


def taints(kube, name: str) -> list[dict]:
    return get_node(kube, name).get("spec", {}).get("taints") or []


def taint_keys(kube, name: str) -> set[str]:
    return {f"{t['key']}={t.get('value', '')}" for t in taints(kube, name)}


def annotation(kube, name: str, key: str) -> Any:
    raw = (get_node(kube, name)["metadata"].get("annotations") or {}).get(key)
    return None if raw is None else json.loads(raw)


def set_annotations(kube, name: str, values: dict[str, str | None]) -> None:
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"metadata": {"annotations": values}},
        content_type="application/merge-patch+json",
    )


def clear_taints(kube, name: str) -> None:
    """What the controller does after a repair."""
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"spec": {"taints": None}},
        content_type="application/merge-patch+json",
    )


def wait_until(
    what: str,
    fn: Callable[[], Any],
    timeout: float,
    interval: float = 0.1,
    on_timeout: Callable[[], str] | None = None,
) -> Any:
    deadline = Deadline(timeout)  # an idle machine's figure, stretched by the load
    while True:
        value = fn()
        if value:
            return value
        if deadline.passed():
            extra = f"\n{on_timeout()}" if on_timeout else ""
            raise AssertionError(f"timed out after {deadline} waiting for {what}{extra}")
        time.sleep(interval)


# -- log lines --------------------------------------------------------------------------
def xid_line(
    code: int = 79,
    bus: int = 0x3B,
    uptime: float = 1843.308145,
    text: str = "GPU has fallen off the bus.",
) -> str:
    return f"[{uptime:12.6f}] NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, pid=2417, name=python3, {text}\n"


def banner(uptime: float = 0.0) -> str:
    return (
        f"[{uptime:12.6f}] Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) "
        "(gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)\n"
    )


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)
        f.flush()


# -- the agent as a process -------------------------------------------------------------
class AgentProcess:
    """``fleetmedic agent`` in a child process; ``netns`` runs it in a fleet node's
    network namespace (``ip netns exec``) so its traffic crosses that node's link."""

    def __init__(
        self,
        node: str,
        kubeconfig: Path,
        log: Path,
        *,
        kernel_log: Path | str = "none",
        args: Sequence[str] = (),
        netns: str | None = None,
        env: dict[str, str] | None = None,
        boot_id_file: Path | None = None,
    ) -> None:
        self.argv = [
            str(FLEETMEDIC),
            "agent",
            "--node-name",
            node,
            "--kubeconfig",
            str(kubeconfig),
            "--kernel-log",
            str(kernel_log),
            "--config",
            "/dev/null",
            "--log-level",
            "debug",
            *(["--boot-id-file", str(boot_id_file)] if boot_id_file else []),
            *args,
        ]
        if netns:
            self.argv = ["ip", "netns", "exec", netns, *self.argv]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.env.pop("KUBERNETES_SERVICE_HOST", None)
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> AgentProcess:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=procs.die_with_parent,
            )
        return self

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM (as kubelet does), then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # strays of ours (probes), if any
        except (ProcessLookupError, PermissionError):
            pass
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.output().splitlines()[-n:])

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def nvml_env(state_dir: Path) -> dict[str, str]:
    """The environment a node's agent has: the fake NVML library and this node's scenario."""
    return {
        "LD_LIBRARY_PATH": str(FAKES / "lib"),
        "FLEETMEDIC_FAKE_NVML": str(state_dir / "nvml.json"),
        "FLEETMEDIC_FAKE_AMD": str(state_dir / "amd.json"),
    }


def h100(n: int = 8, **per_gpu: dict) -> dict:
    """An NVML scenario: ``n`` healthy H100s; ``per_gpu={"3": {"ecc_volatile_uncorrected": 2}}``."""
    gpus = [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            "nvlink": [1] * 18,
        }
        for i in range(n)
    ]
    for i, extra in per_gpu.items():
        gpus[int(i)].update(extra)
    return {"driver_version": "550.90.07", "gpus": gpus}
