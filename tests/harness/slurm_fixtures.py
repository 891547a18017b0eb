"""pytest fixtures for the real Slurm cluster (see tests/harness/slurm.py).

``slurm`` (session): a started :class:`~tests.harness.slurm.SlurmCluster` with three
  nodes (``n1``..``n3``, partition ``gpu``), one per xdist worker. Tests that change a
  node put it back (resume it, clear its Comment/Extra) so the next test finds it idle.
  slurm.env                         {"SLURM_CONF": ...} for client tools and adapters
  slurm.run("scontrol", ...)        a client tool with that env (stdout)
  slurm.nodes()                     sinfo --json's nodes by name
  slurm.wait_saved(text, ...)       slurmctld's node state file holds the texts
  slurm.restart_ctld(kill=True)     SIGKILL slurmctld and start it again (same state)
``slurm_factory`` (function): ``slurm_factory(nodes=2, **start_cluster kwargs) ->
  SlurmCluster``, each stopped when the test ends: for tests that break a cluster.
Tests that use them are marked ``slurm``. They need root and the apt packages of
scripts/setup.d/36-slurm.apt; without the packages the test fails saying so
(FLEETMEDIC_SLURM_SKIP=1 skips instead).
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.harness.slurm import DAEMONS, SlurmCluster, SlurmError, start_cluster


def _check_installed() -> None:
    missing = [b for b in DAEMONS if not shutil.which(b)]
    if not missing:
        return
    msg = f"{', '.join(missing)} not installed; run: bash scripts/setup.sh"
    if os.environ.get("FLEETMEDIC_SLURM_SKIP") == "1":
        pytest.skip(msg)
    pytest.fail(msg, pytrace=False)


def _start(nodes: int, **kwargs) -> SlurmCluster:
    _check_installed()
    try:
        return start_cluster(nodes, **kwargs)
    except SlurmError as exc:
        pytest.fail(f"test Slurm cluster: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def slurm():
    c = _start(3)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def slurm_factory():
    started: list[SlurmCluster] = []

    def start(nodes: int = 2, **kwargs) -> SlurmCluster:
        c = _start(nodes, **kwargs)
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "slurm" in names or "slurm_factory" in names:
            item.add_marker(pytest.mark.slurm)
