"""Retrier: never gives up (unless told), one log line per outage."""

from __future__ import annotations

import logging
import threading

import pytest

from fleetmedic.agent.retry import Retrier, Stopped, follow_log
from fleetmedic.errors import PermanentError, TemporaryError


def flaky(failures, exc):
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] <= failures:
            raise exc
        return "ok"

    return fn, calls


def test_outage_logs_one_warning_and_one_recovery(caplog):
    caplog.set_level(logging.INFO, logger="fleetmedic.agent")
    fn, calls = flaky(
        4, TemporaryError("get node n1: API server https://x unreachable: MaxRetryError", delay=0)
    )
    r = Retrier(threading.Event(), base=0.001, cap=0.002)
    assert r.call("read node", fn) == "ok" and calls["n"] == 5
    msgs = [rec.getMessage() for rec in caplog.records]
    assert len(msgs) == 2 and "unavailable" in msgs[0] and "reachable again" in msgs[1]
    assert all("\n" not in m for m in msgs)


def test_refusals_are_retried_and_logged_once_per_message(caplog):
    caplog.set_level(logging.INFO, logger="fleetmedic.agent")
    fn, _calls = flaky(3, PermanentError("patch node n1: HTTP 403 forbidden"))
    assert Retrier(threading.Event(), base=0.001, cap=0.001).call("patch node n1", fn) == "ok"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].getMessage().startswith(
        "API server refused: patch node n1: HTTP 403"
    )


def test_stop_abandons_the_call():
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        Retrier(stop).call("x", lambda: "never")


def test_give_up_after():
    fn, _ = flaky(10**6, TemporaryError("down", delay=0))
    with pytest.raises(Stopped):
        Retrier(threading.Event(), base=0.01, cap=0.01, give_up_after=0.1).call("x", fn)


class Waits(threading.Event):
    """A stop event that records each wait instead of waiting, and is set after ``n``."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.waits = n, []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if len(self.waits) >= self.n:
            self.set()
        return self.is_set()


def test_a_log_follower_s_wait_doubles_and_starts_over_after_a_healthy_run(caplog):
    # fails at once 3 times, then runs 2 minutes before failing, then fails at once again
    runs = iter([0, 0, 0, 120, 0, 0])
    now = {"t": 0.0}

    def follow():
        now["t"] += next(runs)
        raise OSError("journalctl: cannot open the journal")

    stop = Waits(6)
    follow_log(follow, stop, False, "kernel log", clock=lambda: now["t"])
    assert stop.waits == [1.0, 2.0, 4.0, 1.0, 2.0, 4.0]
    assert caplog.text.count("kernel log: journalctl: cannot open the journal") == 6
