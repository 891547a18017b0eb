"""pytest fixtures for the real test control plane (see tests/harness/kube.py).

``kube`` (session): a started :class:`~tests.harness.kube.KubeCluster` with kwok.
  kube.kubeconfig                                    admin kubeconfig path (os.fspath(kube) too)
  kube.url / kube.server_url(host) / kube.ca_file
  kube.kubeconfig_for_serviceaccount(namespace, name) -> str (kubeconfig path)
  kube.make_nodes(3, prefix=..., labels=..., addresses=[...], taints=[...]) -> [node dicts]
  kube.make_pods(node_name, count, namespace=..., labels=...) -> [pod dicts]
  kube.delete_nodes(names)
  kube.ensure_namespace(namespace)                   namespace + its "default" ServiceAccount
  kube.set_pdb_status(namespace, name, disruptions_allowed)
  kube.restart_apiserver() -> seconds                same port; old watch RVs then get 410
  kube.request(method, path, body) -> dict          admin REST call, raises ApiError
  kube.rss() -> {"etcd": bytes, "kube-apiserver": bytes, "kwok": bytes}
Tests that use it are marked ``kube`` automatically. When the binaries are missing the
test fails with the command that builds them (FLEETMEDIC_KUBE_SKIP=1 skips instead).
Tests share one API server: give nodes and namespaces names of their own.
"""

from __future__ import annotations

import os

import pytest

from tests.harness.kube import KubeCluster, KubeError, find_binaries


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory):
    try:
        binaries = find_binaries()
    except KubeError as exc:
        if os.environ.get("FLEETMEDIC_KUBE_SKIP") == "1":
            pytest.skip(str(exc))
        pytest.fail(str(exc), pytrace=False)
    cluster = KubeCluster(tmp_path_factory.mktemp("kube"), binaries=binaries)
    try:
        cluster.start()
    except KubeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop(keep_logs=True)  # pytest keeps the last few basetemps


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kube" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kube)
