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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    xfails = [item.nodeid for item in items if item.get_closest_marker("xfail")]
    if xfails:
        raise pytest.UsageError(
            f"marked xfail: {', '.join(xfails)}: make the test deterministic, or move the "
            "case into a reproducer script outside the suite (see tests/conftest.py)"
        )
