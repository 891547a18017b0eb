"""deploy/controller as shipped, on the test API server: the controller's namespace,
ServiceAccount and least-privilege RBAC (used by the safety and RBAC integration tests and
bench/scale_idle.py).

- :func:`manifests`: the documents in kustomization order, or the named files; the opt-in
  force-drain grant is not in the kustomization (``manifests(["force-drain.yaml"])``).
- :func:`install_controller_rbac`: apply them all (idempotent; the API server is shared).
"""

from __future__ import annotations

from pathlib import Path

from tests.harness import manifests as shipped

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "controller"
NAMESPACE = "fleetmedic"
SA = "fleetmedic-controller"


def manifests(names: list[str] | None = None) -> list[dict]:
    return shipped.load(DEPLOY, names)


def install_controller_rbac(kube) -> None:
    kube.ensure_namespace("default")
    for doc in manifests():
        shipped.apply(kube, doc)
