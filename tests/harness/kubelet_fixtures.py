"""pytest fixtures for the real kubelet node (see tests/harness/kubelet.py). Opt-in: only
tests that ask for them pay for the second control plane and the node (about 15 s).

``kubelet_cluster`` (session): a :class:`~tests.harness.kube.KubeCluster` of its own
  with kube-controller-manager and kube-scheduler, ``--allow-privileged`` and
  NodeRestriction; no kwok unless a test starts it (``start_kwok()``).
``kubelet_fleet`` (session): a one-node nspawn fleet whose node runs kubelet +
  containerd and is a Ready Node of ``kubelet_cluster`` (named like the fleet node,
  ``node-1``). ``kubelet_fleet.images`` is the directory of OCI archives imported into
  the node at each boot (the pause image, and the agent image when built);
  ``kubelet_fleet.host_sysctls`` the host's values from before the node started.
The host's kubelet-relevant sysctls are snapshotted first; at the end any that changed
are restored and the session fails, naming them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness.fleet import FleetError, start_fleet
from tests.harness.kube import KubeError
from tests.harness.kubelet import (
    HostSysctls,
    KubeletNode,
    find_kubelet_binaries,
    start_control_plane,
    wait_node_ready,
)


def _binaries():
    try:
        return find_kubelet_binaries()
    except KubeError as exc:
        if os.environ.get("FLEETMEDIC_KUBELET_SKIP") == "1":
            pytest.skip(str(exc))
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def kubelet_binaries():
    return _binaries()


@pytest.fixture(scope="session")
def kubelet_cluster(kubelet_binaries, tmp_path_factory: pytest.TempPathFactory):
    try:
        cluster = start_control_plane(tmp_path_factory.mktemp("kubelet-kube"), kubelet_binaries)
    except KubeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop(keep_logs=True)


@pytest.fixture(scope="session")
def kubelet_images(tmp_path_factory: pytest.TempPathFactory):
    """Directory of OCI archives the kubelet node imports at boot."""
    return tmp_path_factory.mktemp("kubelet-images")


@pytest.fixture(scope="session")
def kubelet_fleet(kubelet_cluster, kubelet_binaries, kubelet_images):
    # The fake GPU libraries are bound into nodes only when built before the boot.
    fakes = Path(__file__).resolve().parents[2] / "scripts/setup.d/40-fakes.sh"
    subprocess.run(["bash", str(fakes)], check=True)
    sysctls = HostSysctls()
    try:
        fleet = start_fleet(
            1,
            prefix="pytest",
            owned=True,
            prepare=KubeletNode(kubelet_cluster, kubelet_binaries, kubelet_images),
        )
    except (FleetError, KubeError) as exc:
        sysctls.restore()
        pytest.fail(f"kubelet node: {exc}", pytrace=False)
    fleet.images = kubelet_images
    fleet.host_sysctls = sysctls
    try:
        wait_node_ready(kubelet_cluster, fleet.node(1).name)
        yield fleet
    except KubeError as exc:
        pytest.fail(f"kubelet node: {exc}; console log {fleet.node(1).console_log}", pytrace=False)
    finally:
        fleet.down()
        changed = sysctls.restore()
        if changed:
            pytest.fail(
                f"the kubelet node changed host sysctls (restored): {changed}", pytrace=False
            )
