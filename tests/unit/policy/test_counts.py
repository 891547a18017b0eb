"""Monitor findings that add up: windows, bursts, floors, boots, and replays."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.policy.counts import Limit, add, key_of, to_json

LIMIT = Limit(count=3, window=3600, burst=10)
KEY = key_of("xid.13", "0000:cb:00")


def feed(times, state=None, boot="b1", limit=LIMIT, clock="uptime"):
    crossed = []
    for t in times:
        out = add(state, boot=boot, key=KEY, when=t, clock=clock, limit=limit)
        state = to_json(out.state) if out.changed else state
        crossed.append(out.crossed)
    return state, crossed


def test_the_count_th_occurrence_in_the_window_crosses():
    _, crossed = feed([100, 200, 300])
    assert crossed == [False, False, True]


def test_occurrences_outside_the_window_do_not_add_up():
    _, crossed = feed([100, 100 + 3700, 100 + 7400])
    assert crossed == [False, False, False]


def test_lines_of_one_burst_are_one_event():
    _, crossed = feed([100, 100.5, 101, 105, 300, 600])
    assert crossed == [False, False, False, False, False, True]


def test_a_replay_after_a_restart_changes_nothing():
    state, _ = feed([100, 200])
    again = add(state, boot="b1", key=KEY, when=100, clock="uptime", limit=LIMIT)
    assert not again.changed and not again.crossed
    state, crossed = feed([100, 200, 300], state)  # the whole log read again, plus a new line
    assert crossed == [False, False, True]


def test_after_crossing_the_counted_lines_never_count_again():
    state, crossed = feed([100, 200, 300])
    assert crossed[-1]
    state, crossed = feed([100, 200, 300], state)  # restart: the same lines again
    assert crossed == [False, False, False]
    assert state["seen"][KEY]["f"] == 300
    _, crossed = feed([400, 500, 600], state)  # new occurrences count from zero
    assert crossed == [False, False, True]


def test_a_line_folded_into_the_crossing_burst_never_counts_on_a_replay():
    # 19811 is within the burst of 19801; 16203 then crosses (floor 19801). On a replay
    # the kept times are gone, so only the floor can say 19811 was that event's line.
    once, crossed = feed([16222, 19801, 19811, 16203])
    assert crossed == [False, False, False, True]
    twice, crossed = feed([16222, 19801, 19811, 16203], once)
    assert not any(crossed) and twice == once


def test_a_new_boot_starts_from_zero():
    state, _ = feed([100, 200])
    _, crossed = feed([300], state, boot="b2")
    assert crossed == [False]


def test_count_zero_never_crosses_and_bad_state_is_a_clean_slate():
    _, crossed = feed([100, 200, 300, 400], limit=Limit(0, 3600))
    assert not any(crossed)
    out = add(
        {"boot": "b1", "seen": {KEY: "garbage"}}, boot="b1", key=KEY, when=1, clock="c", limit=LIMIT
    )
    assert out.changed and out.state["seen"][KEY]["t"] == [1]


@given(st.lists(st.floats(min_value=0, max_value=20000, allow_nan=False), max_size=30))
def test_reading_the_log_twice_counts_like_reading_it_once(times):
    once, _ = feed(times)
    twice, crossed_twice = feed(times, once)
    assert not any(crossed_twice)
    assert (twice or {}) == (once or {})
