"""The back-off the controller's watches, cluster loops and waits share."""

from __future__ import annotations

from fleetmedic.backoff import Backoff


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_doubles_to_the_cap_and_only_a_new_cause_is_news():
    b = Backoff(2.0, 15.0, clock=Clock())
    got = [b.failed("refused") for _ in range(6)]
    assert [w for w, _ in got] == [2, 4, 8, 15, 15, 15]
    assert [n for _, n in got] == [True, False, False, False, False, False]
    assert b.failed("HTTP 503") == (15, True)  # news, but the outage's back-off goes on


def test_over_gives_the_outage_length_once_and_starts_again_from_the_first_wait():
    clock = Clock()
    b = Backoff(0.5, 30.0, clock=clock)
    assert b.over() is None  # no outage: nothing to say
    b.failed("down")
    b.failed("down")
    clock.t += 42
    assert b.over() == 42
    assert b.over() is None
    assert b.failed("down") == (0.5, True)


def test_a_cause_with_its_own_first_wait_starts_there_and_never_goes_below_it():
    b = Backoff(2.0, 15.0, clock=Clock())
    assert b.failed("403", first=10.0) == (10.0, True)
    assert b.failed("403", first=10.0) == (15.0, False)
