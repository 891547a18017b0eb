"""A cluster whose loop keeps failing (controller/daemon.py ``_run_cluster``) is retried
with capped exponential back-off and logged once per change of cause, not per retry."""

from __future__ import annotations

import itertools
import logging
import threading
import time

from fleetmedic.controller import daemon
from fleetmedic.errors import TemporaryError


class Failing:
    def __init__(self, log: list[float], causes: list[str]) -> None:
        self.log, self.causes = log, causes

    def run(self, stop, once=False):
        self.log.append(time.monotonic())
        if len(self.log) <= len(self.causes):
            raise TemporaryError(self.causes[len(self.log) - 1])


def test_back_off_doubles_and_each_cause_is_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(daemon, "CLUSTER_RETRY", 0.05)
    monkeypatch.setattr(daemon, "CLUSTER_RETRY_CAP", 0.2)
    causes = ["API server https://10.0.0.9:6443 unreachable"] * 4 + ["profiles: conflict"]
    starts: list[float] = []
    caplog.set_level(logging.INFO, logger=daemon.__name__)
    daemon._run_cluster(
        "beta",
        Failing(starts, causes),
        lambda: Failing(starts, causes),
        threading.Event(),
        False,
        [],
    )
    assert len(starts) == 6, "five failures, then it runs"
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert 0.05 <= gaps[0] < gaps[1] < gaps[2], gaps  # 0.05, 0.1, 0.2 ...
    assert all(g < 0.2 + 0.15 for g in gaps[2:]), gaps  # ... capped
    said = [r.getMessage() for r in caplog.records if "cluster beta" in r.getMessage()]
    assert len(said) == 2, said
    assert "unreachable" in said[0] and "profiles: conflict" in said[1]
