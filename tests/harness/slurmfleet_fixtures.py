"""pytest fixtures for the Slurm fleet (see tests/harness/slurmfleet.py).

``slurm_fleet`` (session): a started :class:`~tests.harness.slurmfleet.SlurmFleet`: three
  fleet nodes (``node-1``..``node-3``, sshd, real reboots) that are idle slurmd nodes of
  one slurmctld (partition ``gpu``, 2 GRES GPUs each), one per xdist worker and Slurm
  release (``slurm_version``: 22.05 and 24.11, see tests/harness/slurm_fixtures.py). A test that
  drains, reboots or breaks a node puts it back: ``slurm_fleet.reset()``.
  slurm_fleet.fleet                  the Fleet (ssh, inventory, faults, boots)
  slurm_fleet.slurm                  the cluster: .env, .run("scontrol", ...), .nodes()
  slurm_fleet.wait_rebooted(n, t)    slurmd back with a boot time after t
``slurm_fleet_factory`` (function): ``slurm_fleet_factory(nodes=1, **start_slurm_fleet
  kwargs) -> SlurmFleet``, each torn down when the test ends.

A Slurm fleet starts in about as long as a plain fleet (seconds; see the report in
docs/slurm.md), so like ``fleet`` it needs no WORKER_GROUPS entry. Tests that use them are
marked ``slurm`` and ``fleet``. Without Slurm's apt packages the test fails saying so
(FLEETMEDIC_SLURM_SKIP=1 skips instead, as for the bare Slurm cluster).
"""

from __future__ import annotations

import pytest

from tests.harness.slurm_fixtures import _check_installed
from tests.harness.slurmfleet import SlurmFleet, SlurmFleetError, start_slurm_fleet


def _start(nodes: int, **kwargs) -> SlurmFleet:
    _check_installed(kwargs.get("version", "22.05"))
    try:
        return start_slurm_fleet(nodes, **kwargs)
    except SlurmFleetError as exc:
        pytest.fail(f"Slurm fleet: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def slurm_fleet(slurm_version):
    sf = _start(3, version=slurm_version)
    try:
        yield sf
    finally:
        sf.down()


@pytest.fixture
def slurm_fleet_factory(slurm_version):
    started: list[SlurmFleet] = []

    def start(nodes: int = 1, **kwargs) -> SlurmFleet:
        sf = _start(nodes, **{"version": slurm_version, **kwargs})
        started.append(sf)
        return sf

    yield start
    errors = []
    for sf in reversed(started):
        try:
            sf.down()
        except SlurmFleetError as exc:
            errors.append(str(exc))
    if errors:
        pytest.fail("; ".join(errors), pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "slurm_fleet" in names or "slurm_fleet_factory" in names:
            item.add_marker(pytest.mark.slurm)
            item.add_marker(pytest.mark.fleet)
