"""A cluster whose loop keeps failing (controller/daemon.py ``_run_cluster``) is retried
with capped exponential back-off and logged once per change of cause, not per retry."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from fleetmedic.controller import daemon
from fleetmedic.errors import TemporaryError


class Failing:
    def __init__(self, log: list[float], causes: list[str]) -> None:
        self.log, self.causes = log, causes

    def run(self, stop, once=False):
        self.log.append(time.monotonic())
        if len(self.log) <= len(self.causes):
            raise TemporaryError(self.causes[len(self.log) - 1])


class WaitsRecorded(threading.Event):
    """A stop event that is never set and keeps each wait's timeout instead of waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout if timeout is not None else float("inf"))
        return False


def test_back_off_doubles_and_each_cause_is_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(daemon, "CLUSTER_RETRY", 0.05)
    monkeypatch.setattr(daemon, "CLUSTER_RETRY_CAP", 0.2)
    causes = ["API server https://10.0.0.9:6443 unreachable"] * 4 + ["profiles: conflict"]
    starts: list[float] = []
    caplog.set_level(logging.INFO, logger=daemon.__name__)
    stop = WaitsRecorded()
    daemon._run_cluster(
        "beta",
        Failing(starts, causes),
        lambda: Failing(starts, causes),
        stop,
        False,
        [],
    )
    assert len(starts) == 6, "five failures, then it runs"
    # the waits asked for, not the gaps a loaded machine stretches (0.134 s, then 0.100 s
    # in a CI run at load 20): 0.05, 0.1, 0.2, then capped
    assert stop.waits == pytest.approx([0.05, 0.1, 0.2, 0.2, 0.2]), stop.waits
    said = [r.getMessage() for r in caplog.records if "cluster beta" in r.getMessage()]
    assert len(said) == 2, said
    assert "unreachable" in said[0] and "profiles: conflict" in said[1]
