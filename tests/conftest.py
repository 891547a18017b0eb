"""Shared fixtures. The heavy ones (fleet, API server, SMTP sink, Loki, Receptor mesh)
live in
tests/harness and are registered here as plugins so every test can use them.

Under ``CI=true`` the run refuses every ``FLEETMEDIC_*_SKIP`` switch (they turn a missing
build into skipped tests): CI must run every test (scripts/test.sh checks the same)."""

import os
import re

import pytest

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
