"""pytest fixtures for the nspawn test fleet (registered by tests/conftest.py).

- ``fleet``: one 3-node fleet for the whole session (``tests.harness.fleet.Fleet``).
  Tests that break nodes (hang, link down, slow boot) should use ``fleet_factory`` or
  undo their faults (``fleet.reset_faults()``), since the next test shares the fleet.
- ``fleet_factory``: ``fleet_factory(nodes=1, **start_fleet_kwargs) -> Fleet``; every
  fleet it starts is torn down when the test ends, passed or failed.

Fleets started here are owned by the pytest process: if pytest is killed, each fleet's
supervisor tears it down; a later run also sweeps whatever is left (``cleanup_stale``).
A fleet that cannot start fails the test with one line naming the node and its console
log.
"""

from __future__ import annotations

import pytest

from tests.harness.fleet import Fleet, FleetError, start_fleet


def _start(nodes: int, **kwargs) -> Fleet:
    try:
        return start_fleet(nodes, prefix="pytest", owned=True, **kwargs)
    except FleetError as exc:
        pytest.fail(f"test fleet: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def fleet():
    f = _start(3)
    try:
        yield f
    finally:
        f.down()


@pytest.fixture
def fleet_factory():
    started: list[Fleet] = []

    def start(nodes: int = 1, **kwargs) -> Fleet:
        f = _start(nodes, **kwargs)
        started.append(f)
        return f

    yield start
    errors = []
    for f in reversed(started):
        try:
            f.down()
        except FleetError as exc:
            errors.append(str(exc))
    if errors:
        pytest.fail("; ".join(errors), pytrace=False)
