"""pytest fixtures for the real Loki (see tests/harness/loki.py).

``loki`` (session): a started :class:`~tests.harness.loki.Loki` shared by the session;
  give your streams labels of their own (e.g. a node name with a random suffix).
  loki.url                                   http://127.0.0.1:<port> (LOG_ENDPOINT)
  loki.push(labels, lines) -> [ts]           through /loki/api/v1/push
  loki.query_range(query, start=, end=, limit=, direction=) -> [Entry(labels, ts, line)]
  loki.wait_for(query, n, timeout)           poll query_range until n lines
  loki.tail(query, start=) as t: t.wait_for(n)   the websocket tail
``loki_factory`` (function): ``loki_factory(**Loki kwargs) -> Loki``, each stopped when
  the test ends. Use it to restart or kill Loki (``restart()``, ``restart(kill=True)``,
  ``kill()`` then ``start()``): the shared one must stay up for the others.
``promtool`` (session): the promtool binary built from the same module (a Path).
``pod_labels(shipper, ...)``/``kernel_labels(shipper, node=)`` (plain functions in
  tests.harness.loki) give the labels Promtail/Alloy, Fluent Bit or an OTel collector set.
Tests that use them are marked ``loki`` (``promtool``). When the binaries are missing the
test fails with the command that builds them (FLEETMEDIC_LOKI_SKIP=1 skips instead).
"""

from __future__ import annotations

import os

import pytest

from tests.harness.loki import Binaries, Loki, LokiError, find_binaries


@pytest.fixture(scope="session")
def loki_binaries() -> Binaries:
    try:
        return find_binaries()
    except LokiError as exc:
        if os.environ.get("FLEETMEDIC_LOKI_SKIP") == "1":
            pytest.skip(str(exc))
        pytest.fail(str(exc), pytrace=False)


def _start(binaries: Binaries, workdir, **kwargs) -> Loki:
    loki = Loki(workdir, binaries=binaries, **kwargs)
    try:
        return loki.start()
    except LokiError as exc:
        loki.stop(keep_data=True)
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def loki(loki_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory):
    server = _start(loki_binaries, tmp_path_factory.mktemp("loki"))
    try:
        yield server
    finally:
        server.stop(keep_data=True)  # pytest keeps the last few basetemps (log, data)


@pytest.fixture
def loki_factory(loki_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory):
    started: list[Loki] = []

    def start(**kwargs) -> Loki:
        server = _start(loki_binaries, tmp_path_factory.mktemp("loki"), **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop(keep_data=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "loki" in names or "loki_factory" in names:
            item.add_marker(pytest.mark.loki)
        if "promtool" in names:
            item.add_marker(pytest.mark.promtool)


@pytest.fixture(scope="session")
def promtool(loki_binaries: Binaries):
    """The promtool built with Loki (same Prometheus module), as a Path."""
    return loki_binaries.promtool
