"""A watch that cannot reach the API server backs off and logs state changes only."""

from __future__ import annotations

import logging

from fleetmedic.controller.watcher import _Outage
from fleetmedic.errors import PermanentError, TemporaryError


def test_back_off_doubles_to_the_cap_and_logs_once_per_cause(caplog):
    outage = _Outage("node", 2.0)
    down = TemporaryError("API server 127.0.0.1:6443 unreachable")
    with caplog.at_level(logging.INFO, logger="fleetmedic.controller.watcher"):
        waits = [outage.failed(down) for _ in range(8)]
        assert waits == [2, 4, 8, 15, 15, 15, 15, 15]
        assert [r.levelno for r in caplog.records] == [logging.WARNING]
        outage.failed(TemporaryError("HTTP 503 from the API server"))  # a new cause: news
        outage.over()
        outage.over()  # (already over: nothing to say)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "unreachable" in lines[0] and "503" in lines[1]
    assert "answers again" in lines[2]
    assert outage.failed(down) == 2  # a new outage starts from the first delay


def test_a_refusal_starts_higher_and_is_an_error(caplog):
    outage = _Outage("node", 2.0)
    with caplog.at_level(logging.INFO, logger="fleetmedic.controller.watcher"):
        assert outage.failed(PermanentError("403 Forbidden: nodes is forbidden")) == 10
        assert outage.failed(PermanentError("403 Forbidden: nodes is forbidden")) == 15
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
