"""Shared helpers for the safety and RBAC tests (tests/integration/test_safety_*.py,
test_rbac_controller.py). No tests here.

- ``safety_bench`` fixture: like test_controller_e2e's ``bench``: a fresh fleet, its
  nodes prepared, a pool name, config writing and controller processes that are stopped
  (log shown) at the end, and the pool's kwok Nodes deleted so no later test sees them.
- :func:`install_controller_rbac`: deploy/controller as shipped (kustomization order),
  plus the opt-in force-drain grant when asked.
- :func:`intervals`: per node, the [start, end] of every attempt recorded in its history
  annotation, as datetimes.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from tests.harness import ctlenv
from tests.harness.ctlenv import ControllerProcess

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "controller"
NAMESPACE = "fleetmedic"
SA = "fleetmedic-controller"
REPAIR_KEY = "fleetmedic.io/repair"

_COLLECTIONS = {
    ("v1", "Namespace"): "/api/v1/namespaces",
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{ns}/serviceaccounts",
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"):
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    ("rbac.authorization.k8s.io/v1", "Role"): "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"):
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


def manifests(names: list[str] | None = None) -> list[dict]:
    order = names or yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    docs: list[dict] = []
    for name in order:
        docs += [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    return docs


def apply(kube, doc: dict) -> dict:
    meta = doc["metadata"]
    base = _COLLECTIONS[(doc["apiVersion"], doc["kind"])].format(ns=meta.get("namespace", ""))
    created = kube.request("POST", base, doc, ok=(409,))
    if created.get("kind") != "Status":
        return created
    current = kube.request("GET", f"{base}/{meta['name']}")
    body = {**doc, "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}}
    return kube.request("PUT", f"{base}/{meta['name']}", body)


def remove(kube, doc: dict) -> None:
    meta = doc["metadata"]
    base = _COLLECTIONS[(doc["apiVersion"], doc["kind"])].format(ns=meta.get("namespace", ""))
    kube.request("DELETE", f"{base}/{meta['name']}", ok=(404,))


def install_controller_rbac(kube) -> None:
    kube.ensure_namespace("default")
    for doc in manifests():
        apply(kube, doc)


def state_of(kube, name: str) -> str:
    values = [t["value"] for t in ctlenv.taints(kube, name) if t["key"] == REPAIR_KEY]
    return values[0] if values else "healthy"


def history(kube, name: str) -> list[dict]:
    return ctlenv.annotation(kube, name, "fleetmedic.io/history", [])


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def intervals(kube, names: list[str]) -> dict[str, list[tuple[datetime, datetime, dict]]]:
    return {n: [(_t(a["start"]), _t(a["end"]), a) for a in history(kube, n)
                if a.get("start") and a.get("end")] for n in names}


def max_overlap(spans: list[tuple[datetime, datetime]]) -> int:
    """Most spans open at one instant (an end and a start at the same instant do not overlap)."""
    points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda p: (p[0], p[1]))
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


@pytest.fixture
def safety_bench(kube, fleet_factory, tmp_path, request):
    started: list[ControllerProcess] = []
    made: list[str] = []

    class Bench:
        def __init__(self, nodes: int = 1, tag: str = "sf") -> None:
            self.fleet = fleet_factory(nodes)
            ctlenv.prepare_nodes(self.fleet)
            self.kube = kube
            self.pool = f"{tag}{uuid.uuid4().hex[:5]}"
            self.dir = tmp_path

        def register(self, taints_by_index: dict[int, list[dict]] | None = None) -> list[str]:
            by_name = {f"{self.pool}-{i}": t for i, t in (taints_by_index or {}).items()}
            names = list(ctlenv.register(kube, self.fleet, self.pool, taints=by_name))
            made.extend(names)
            return names

        def make_nodes(self, names: list[str], addresses: list[str], taints=()) -> list[str]:
            """kwok Nodes in this pool whose InternalIPs are the given fleet addresses
            (several Nodes may share one SSH node)."""
            kube.make_nodes(names, labels={ctlenv.POOL_LABEL: self.pool,
                                           "fleetmedic.io/gpu-vendor": "nvidia",
                                           "fleetmedic.io/expected-gpus": "2"},
                            addresses=addresses, taints=list(taints))
            made.extend(names)
            return names

        def config(self, smtp=None, name: str = "ctl", **overrides) -> Path:
            return ctlenv.write_config(self.dir / name, kube, self.fleet, self.pool, smtp,
                                       overrides)

        def controller(self, config: Path, n: int = 1) -> ControllerProcess:
            p = ControllerProcess(config, self.dir / f"controller-{n}.log").start()
            started.append(p)
            return p

    yield Bench
    for p in started:
        p.stop()
        print(f"--- {p.log} ---\n{p.tail(60)}")
    if made:
        kube.delete_nodes(made)


def dump(obj) -> str:
    return json.dumps(obj, indent=1, default=str)[:3000]
