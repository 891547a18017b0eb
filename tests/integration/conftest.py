"""Fixtures shared by the integration tests (pytest finds them here; nothing to import).

The session-wide ones (``kube``, ``fleet``, ``fleet_factory``, ``smtp_sink``) come from
tests/harness/*_fixtures.py through tests/conftest.py. The helpers these fixtures and the
tests use are plain modules in tests/harness (``ctlenv``, ``ctlrbac``, ``agentenv``),
imported by name, so the benchmarks can use them too.

- ``fakes``: the hardware stand-ins built (scripts/setup.d/40-fakes.sh; a no-op when they
  are up to date), as the path of tests/fakes/build.
- ``safety_bench``: tests/harness/ctlbench.py's bench for the safety, lease and RBAC tests:
  ``safety_bench(nodes=1, tag="sf")`` gives a fresh fleet with its nodes prepared and a pool
  named ``<tag><random>``; at the end the controllers it started are stopped (their log's
  tail shown) and its kwok Nodes deleted, so no later test sees them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.harness.agentenv import FAKES, ROOT
from tests.harness.ctlbench import Benches, pool_name


@pytest.fixture(scope="session")
def fakes() -> Path:
    subprocess.run(["bash", str(ROOT / "scripts/setup.d/40-fakes.sh")], check=True)
    return FAKES


@pytest.fixture
def safety_bench(kube, fleet_factory, tmp_path):
    benches = Benches(kube, fleet_factory, tmp_path)
    yield lambda nodes=1, tag="sf": benches.new(nodes, pool_name(tag))
    benches.stop_controllers(log_lines=60)
    benches.delete_nodes()
