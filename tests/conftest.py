"""Shared fixtures. The heavy ones (fleet, API server, SMTP sink, Loki, Receptor mesh)
live in
tests/harness and are registered here as plugins so every test can use them.

Under ``CI=true`` the run refuses every ``FLEETMEDIC_*_SKIP`` switch (they turn a missing
build into skipped tests) and every switch that puts something else in place of a real part
(``tests.harness.procs.REPLACING_SWITCHES``: a developer's own build, the patched Receptor):
CI must run every test against what setup builds (scripts/test.sh checks the same).

No test may be marked expected-to-fail: an xfail is a run that passes whether the code
works or not. A case that fails by chance upstream is made deterministic, or lives in a
reproducer script outside the suite (tests/receptor/wedge_repro.py)."""

import os
import re

import pytest

from tests.harness.procs import ReplacedUnderCI, refuse_under_ci

pytest_plugins = [
    p
    for p in (
        "tests.harness.smtp_fixtures",
        "tests.harness.fleet_fixtures",
        "tests.harness.kube_fixtures",
        "tests.harness.kubelet_fixtures",
        "tests.harness.loki_fixtures",
        "tests.harness.mesh_fixtures",
    )
    if __import__("importlib.util").util.find_spec(p) is not None
]

SKIP_SWITCH = re.compile(r"FLEETMEDIC_\w+_SKIP")


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("CI") != "true":
        return
    switches = sorted(k for k, v in os.environ.items() if SKIP_SWITCH.fullmatch(k) and v)
    if switches:
        raise pytest.UsageError(
            f"refused under CI=true: {', '.join(switches)} (CI runs every test; unset them)"
        )
    try:
        refuse_under_ci()
    except ReplacedUnderCI as e:
        raise pytest.UsageError(str(e)) from None


# Under pytest-xdist (scripts/test.sh runs ``-n N --dist loadgroup``) the tests that share a
# heavy fixture run on one worker, so that worker brings it up once and the others never:
# by the session fixture they use (the kubelet node, Loki, the Receptor mesh), else, for an
# integration test, by its file (module-scoped fleets and controllers come up once). Unit
# tests have no group and spread over every worker. Each worker brings up its own API
# server and session fleet (free ports, free fleet subnets, names with its pid).
GROUP_BY_FIXTURE = {
    "kubelet_cluster": "kubelet",
    "kubelet_fleet": "kubelet",
    "loki": "loki",
    "loki_factory": "loki",
    "mesh_binaries": "receptor",
}


def xdist_group(item: pytest.Item) -> str | None:
    """The worker group of ``item`` (None: any worker)."""
    names = set(getattr(item, "fixturenames", ()))
    for fixture, group in GROUP_BY_FIXTURE.items():
        if fixture in names:
            return group
    path = item.nodeid.split("::", 1)[0]
    return path if path.startswith("tests/integration/") else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    xfails = [item.nodeid for item in items if item.get_closest_marker("xfail")]
    if xfails:
        raise pytest.UsageError(
            f"marked xfail: {', '.join(xfails)}: make the test deterministic, or move the "
            "case into a reproducer script outside the suite (see tests/conftest.py)"
        )
    if config.getoption("dist", None) != "loadgroup":
        return
    for item in items:
        group = xdist_group(item)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
