"""pytest fixtures for the real Slurm cluster (see tests/harness/slurm.py).

Every test of a Slurm fixture has its release in its id (``slurm_version``, a session
parameter: ``test_x[slurm-22.05]``), and runs on the releases the test clusters have
(scripts/slurm-releases.toml, read by tests/harness/slurm24.py): ``22.05`` (Debian 12's,
on the host), ``24.11`` (Debian 13's) and ``26.05`` (Debian 14's), each from its node
tree. A release flagged ``contract_only`` (26.05) runs only the release-contract tests,
those marked ``slurm_contract`` (a module's ``pytestmark`` or one test's marker): what
fleetmedic relies on from each Slurm release (the JSON it parses, the single-node read and
its RPCs, the writes, the saved state) and one end-to-end repair; every other Slurm test
runs on the other releases. ``FLEETMEDIC_SLURM_RELEASES=22.05`` (a comma-separated list)
narrows a desk run to some releases (``26.05``: its contract tests); CI runs them all. An
unknown release is a usage error. ``@pytest.mark.slurm_releases("22.05", reason=...)``
keeps one test off the other releases, for a known gap said in its reason. While a test
of a tree's release runs, that release's client tools come first on PATH (as on a bastion
with it installed), so what the test runs (``fleetmedic``, ``ansible-inventory``, the
adapter) talks to its cluster with that release's tools.

``slurm`` (session): a started :class:`~tests.harness.slurm.SlurmCluster` with three
  nodes (``n1``..``n3``, partition ``gpu``), one per xdist worker and release. Tests that change a
  node put it back (resume it, clear its Comment/Extra) so the next test finds it idle.
  slurm.env                         {"SLURM_CONF": ...} for client tools and adapters
  slurm.run("scontrol", ...)        a client tool with that env (stdout)
  slurm.nodes()                     the nodes by name, in 22.05's sinfo --json fields
  slurm.version, slurm.bin_dir      its release, and where its client tools are
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

from tests.harness import slurm24
from tests.harness.slurm import DAEMONS, SlurmCluster, SlurmError, start_cluster

SLURM_FIXTURES = frozenset({"slurm", "slurm_factory", "slurm_fleet", "slurm_fleet_factory"})


def _check_installed(version: str = "22.05") -> None:
    missing = [b for b in DAEMONS if version == "22.05" and not shutil.which(b)]
    if not missing:
        return
    msg = f"{', '.join(missing)} not installed; run: bash scripts/setup.sh"
    if os.environ.get("FLEETMEDIC_SLURM_SKIP") == "1":
        pytest.skip(msg)
    pytest.fail(msg, pytrace=False)


def _start(nodes: int, **kwargs) -> SlurmCluster:
    _check_installed(kwargs.get("version", "22.05"))
    try:
        return start_cluster(nodes, **kwargs)
    except SlurmError as exc:
        pytest.fail(f"test Slurm cluster: {exc}", pytrace=False)


def releases() -> tuple[str, ...]:
    """The releases Slurm tests run on: all of them, or those ``FLEETMEDIC_SLURM_RELEASES``
    names (a desk run's shortcut). An unknown name is an error, not a silent skip."""
    wanted = os.environ.get("FLEETMEDIC_SLURM_RELEASES", "").strip()
    if not wanted:
        return slurm24.VERSIONS
    names = tuple(v.strip() for v in wanted.split(",") if v.strip())
    unknown = [v for v in names if v not in slurm24.VERSIONS]
    if unknown or not names:
        raise pytest.UsageError(
            f"FLEETMEDIC_SLURM_RELEASES={wanted!r}: the test clusters run "
            f"{', '.join(slurm24.VERSIONS)}"
        )
    return names


def runs_on(version: str, *, contract: bool, only: tuple[str, ...] | None) -> bool:
    """Whether a test runs on the release ``version``: a contract-only release runs the
    ``slurm_contract`` tests alone; ``only``: the test's ``slurm_releases``."""
    if only is not None and version not in only:
        return False
    return contract or not slurm24.release(version).contract_only


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each Slurm test once per release (:func:`releases`), but those its
    ``slurm_releases`` marker leaves out, and on a contract-only release only the tests
    marked ``slurm_contract``."""
    if "slurm_version" not in metafunc.fixturenames:
        return
    only = metafunc.definition.get_closest_marker("slurm_releases")
    if only is not None and not only.kwargs.get("reason"):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: slurm_releases needs a reason")
    contract = metafunc.definition.get_closest_marker("slurm_contract") is not None
    metafunc.parametrize(
        "slurm_version",
        [
            v
            for v in releases()
            if runs_on(v, contract=contract, only=None if only is None else only.args)
        ],
        ids=lambda v: f"slurm-{v}",
        indirect=True,
        scope="session",
    )


@pytest.fixture(scope="session")
def slurm_version(request) -> str:
    """The Slurm release of the test (session-wide, so each worker runs one at a time)."""
    return request.param


@pytest.fixture(autouse=True)
def slurm_client_tools(request, monkeypatch) -> None:
    """For a test of a tree's release (24.11, 26.05): its client tools first on PATH (see
    above)."""
    if not SLURM_FIXTURES & set(request.fixturenames):
        return
    version = request.getfixturevalue("slurm_version")
    if version == slurm24.HOST_RELEASE:
        return
    try:
        bin_dir = slurm24.shared(version).bin_dir
    except slurm24.Slurm24Error as exc:
        pytest.fail(f"Slurm {version}: {exc}", pytrace=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture(scope="session")
def slurm(slurm_version):
    c = _start(3, version=slurm_version)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def slurm_factory(slurm_version):
    started: list[SlurmCluster] = []

    def start(nodes: int = 2, **kwargs) -> SlurmCluster:
        c = _start(nodes, **{"version": slurm_version, **kwargs})
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
