"""deploy/ manifests applied to and removed from the test API server as admin, exactly as
shipped (no kustomize binary: the kustomizations only list files, in order).

Used by tests/harness/agentenv.py (deploy/agent), tests/harness/ctlrbac.py
(deploy/controller) and tests/integration/test_loki_source.py (deploy/loki-source).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

# (apiVersion, kind) -> collection path; the kinds that deploy/ ships, nothing more.
_COLLECTIONS = {
    ("v1", "Namespace"): "/api/v1/namespaces",
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{ns}/serviceaccounts",
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("apps/v1", "DaemonSet"): "/apis/apps/v1/namespaces/{ns}/daemonsets",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
    ): "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
    ): "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    (
        "rbac.authorization.k8s.io/v1",
        "Role",
    ): "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    (
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
    ): "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
    ): "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
    ): "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
}


def load(deploy: Path, names: Sequence[str] | None = None) -> list[dict]:
    """The documents of ``names`` in ``deploy`` (default: its kustomization's resources, in
    order)."""
    order = names or yaml.safe_load((deploy / "kustomization.yaml").read_text())["resources"]
    docs: list[dict] = []
    for name in order:
        docs += [d for d in yaml.safe_load_all((deploy / name).read_text()) if d]
    return docs


def _collection(doc: dict) -> str:
    return _COLLECTIONS[(doc["apiVersion"], doc["kind"])].format(
        ns=doc["metadata"].get("namespace", "")
    )


def apply(kube, doc: dict) -> dict:
    """Create ``doc``, or replace it if it exists (so a changed manifest takes effect)."""
    meta = doc["metadata"]
    base = _collection(doc)
    created = kube.request("POST", base, doc, ok=(409,))
    if created.get("kind") != "Status":
        return created
    current = kube.request("GET", f"{base}/{meta['name']}")
    body = {**doc, "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}}
    return kube.request("PUT", f"{base}/{meta['name']}", body)


def remove(kube, doc: dict) -> None:
    """Delete ``doc``'s object; gone already is fine."""
    kube.request("DELETE", f"{_collection(doc)}/{doc['metadata']['name']}", ok=(404,))
