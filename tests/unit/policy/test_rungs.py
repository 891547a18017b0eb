"""Where a fenced state enters a configured ladder, and what comes next."""

from __future__ import annotations

import pytest

from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy.rungs import entry_rung, next_rung, passed_over

FULL = ("reset", "reboot", "power_cycle", "reimage", "replace", "manual")
CLOUD = ("reset", "reboot", "replace", "manual")
DEFAULT = ("reset", "reboot", "reimage", "manual")
SHORT = ("reboot", "manual")


@pytest.mark.parametrize(
    "order,state,rung",
    [
        (DEFAULT, "reset", "reset"),
        (DEFAULT, "power_cycle", "reimage"),  # left out: the next rung up, never a milder one
        (SHORT, "reset", "reboot"),
        (SHORT, "reimage", "manual"),
        (("manual",), "reset", "manual"),
        (CLOUD, "reimage", "replace"),  # a cloud pool replaces what others reimage
        (DEFAULT, "replace", "manual"),  # fenced for a replacement this pool does not do
        (DEFAULT, "diagnose", "reset"),  # a pool without diagnostics starts at its first rung
        (SHORT, "diagnose", "reboot"),
    ],
)
def test_entry_rung(order, state, rung):
    assert entry_rung(order, state) == rung


@pytest.mark.parametrize(
    "order,step,nxt",
    [
        (DEFAULT, "reset", "reboot"),
        (DEFAULT, "reboot", "reimage"),
        (DEFAULT, "reimage", "manual"),
        (DEFAULT, "manual", "manual"),
        (FULL, "reboot", "power_cycle"),
        (FULL, "reimage", "replace"),
        (CLOUD, "reboot", "replace"),
        (CLOUD, "replace", "manual"),
        (SHORT, "reset", "reboot"),  # a rung the order lacks (config changed mid-episode)
    ],
)
def test_next_rung(order, step, nxt):
    assert next_rung(order, step) == nxt


def test_every_state_enters_a_rung_at_least_as_strong_and_climbing_ends_in_manual():
    for order in (FULL, DEFAULT, CLOUD, SHORT, ("manual",)):
        assert passed_over(order) == tuple(s for s in REPAIR_STATES if s not in order)
        for state in REPAIR_STATES:
            rung = entry_rung(order, state)
            assert rung in order
            assert REPAIR_STATES.index(rung) >= REPAIR_STATES.index(state)
            seen = [rung]
            while seen[-1] != "manual":
                seen.append(next_rung(order, seen[-1]))
                assert len(seen) <= len(order)
            assert seen == list(order[order.index(rung) :])
