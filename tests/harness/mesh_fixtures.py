"""pytest fixtures for the Receptor test mesh (see tests/harness/mesh.py).

``mesh`` (function): the controller's node plus two execution nodes over the session
  ``fleet``: ``exec-1`` reaches node-1, ``exec-2`` reaches node-2 and node-3.
  mesh.socket                      the controller node's control socket (receptorctl)
  mesh.work_type / mesh.tls_client "ansible-runner" / "mesh-client" (submit with
                                   --tls-client and --signwork)
  mesh.tls                         CA, controller cert/key, work signing keys
  mesh.settings()                  all of the above as plain data, for an executor
  mesh.routes / mesh.executor_for(host)    fleet node -> execution node
  mesh.receptorctl(*args)          the CLI against the controller's socket
  mesh.node("exec-1").kill()/start()/cut_mesh()/heal_mesh()/pause()/resume()
  mesh.work_units(), mesh.unit_dirs()      what is left on each node
``mesh_factory(shares, **kwargs) -> Mesh``: any shares (``{"exec-a": [nodes]}``, nodes
  of one or more fleets); every mesh it starts is stopped when the test ends. Stock
  Receptor; ``binaries=patched_mesh_binaries`` for the build with tests/receptor/patches.
Tests that use them are marked ``receptor`` (and ``fleet``). When receptor is not built
the test fails with the command that builds it (FLEETMEDIC_RECEPTOR_SKIP=1 skips).
"""

from __future__ import annotations

import os

import pytest

from tests.harness.mesh import Binaries, Mesh, MeshError, find_binaries, start_mesh, two_shares


@pytest.fixture(scope="session")
def mesh_binaries() -> Binaries:
    try:
        return find_binaries()
    except MeshError as exc:
        if os.environ.get("FLEETMEDIC_RECEPTOR_SKIP") == "1":
            pytest.skip(str(exc))
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def patched_mesh_binaries(mesh_binaries: Binaries) -> Binaries:
    try:
        return find_binaries(patched=True)
    except MeshError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def mesh_factory(mesh_binaries: Binaries):
    started: list[Mesh] = []

    def start(shares, **kwargs) -> Mesh:
        try:
            m = start_mesh(shares, **{"binaries": mesh_binaries, **kwargs})
        except MeshError as exc:
            pytest.fail(f"test mesh: {exc}", pytrace=False)
        started.append(m)
        return m

    yield start
    for m in reversed(started):
        m.stop()


@pytest.fixture
def mesh(mesh_factory, fleet) -> Mesh:
    return mesh_factory(two_shares(fleet))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "mesh" in names or "mesh_factory" in names:
            item.add_marker(pytest.mark.receptor)
            item.add_marker(pytest.mark.fleet)
