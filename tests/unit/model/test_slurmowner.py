"""Ownership of Slurm drains (model/slurmowner.py) and our reason's format
(model/slurmreason.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.model.slurmowner import FOREIGN_PREFIXES, Owner, may_resume, owner
from fleetmedic.model.slurmreason import (
    FINDING_MAX,
    OurReason,
    format_reason,
    is_ours,
    parse_reason,
)
from fleetmedic.model.vocabulary import REPAIR_STATES


@pytest.mark.parametrize(
    ("reason", "want"),
    [
        ("fleetmedic: reboot: xid 79", Owner.OURS),
        ("fleetmedic: reboot: xid 79 : reboot issued", Owner.OURS),  # Slurm's suffix
        ("NHC: check_hw_gpu: GPU 0 missing", Owner.FOREIGN_NHC),
        ("Action:Reboot", Owner.FOREIGN_HYPERPOD),
        ("Action:Replace instance i-0abc", Owner.FOREIGN_HYPERPOD),
        ("[node_problem] GPU health check failed", Owner.FOREIGN_SOPERATOR),
        ("[hardware_problem] ib port down", Owner.FOREIGN_SOPERATOR),
        ("slurm-operator: node drained by NodeSet", Owner.FOREIGN_SLINKY),
        ("Not responding", Owner.FOREIGN),
        ("reboot timed out", Owner.FOREIGN),
        ("RMA ticket 4711 (alice)", Owner.FOREIGN),
        # an edited reason is no longer ours, and case and position matter
        ("was fleetmedic: reboot: xid 79", Owner.FOREIGN),
        (" fleetmedic: reboot: xid 79", Owner.FOREIGN),
        ("Fleetmedic: reboot: xid 79", Owner.FOREIGN),
        ("nhc: lower case is not NHC's", Owner.FOREIGN),
        ("", Owner.NONE),
        ("   ", Owner.NONE),
        (None, Owner.NONE),
    ],
)
def test_owner_by_reason(reason, want):
    assert owner(reason) is want
    assert may_resume(reason) is (want is Owner.OURS)
    assert want.foreign is (want not in (Owner.NONE, Owner.OURS))


def test_a_configured_prefix_replaces_ours():
    assert owner("fm-east: reset: xid 48", prefix="fm-east:") is Owner.OURS
    assert owner("fleetmedic: reset: xid 48", prefix="fm-east:") is Owner.FOREIGN
    # a site that takes a foreign tool's prefix as its own has said those drains are ours
    assert owner("NHC: x", prefix="NHC:") is Owner.OURS


def test_every_foreign_owner_has_a_prefix_and_none_is_a_prefix_of_ours():
    owners = {who for _, who in FOREIGN_PREFIXES}
    assert owners == {o for o in Owner if o.foreign and o is not Owner.FOREIGN}
    assert not any("fleetmedic:".startswith(p) for p, _ in FOREIGN_PREFIXES)


@given(st.text(max_size=80))
def test_owner_is_total_and_ours_only_with_the_prefix(reason):
    got = owner(reason)
    assert isinstance(got, Owner)
    assert (got is Owner.OURS) == reason.startswith("fleetmedic:")
    assert may_resume(reason) == (got is Owner.OURS)


@given(st.sampled_from(REPAIR_STATES), st.text(max_size=400))
def test_a_formatted_reason_is_one_line_ours_and_parses_back(rung, finding):
    reason = format_reason(rung, finding)
    assert "\n" not in reason and "\r" not in reason
    assert owner(reason) is Owner.OURS
    parsed = parse_reason(reason)
    assert parsed is not None and parsed.rung == rung
    assert len(parsed.finding) <= FINDING_MAX


def test_format_and_parse():
    r = format_reason("reboot", "xid 79\n  on GPU 0000:3b:00.0")
    assert r == "fleetmedic: reboot: xid 79 on GPU 0000:3b:00.0"
    assert parse_reason(r) == OurReason("reboot", "xid 79 on GPU 0000:3b:00.0")
    assert format_reason("manual", "") == "fleetmedic: manual: no finding"
    assert format_reason("reset", "x", prefix="fm:") == "fm: reset: x"


@pytest.mark.parametrize(
    "reason",
    ["NHC: x", "fleetmedic: nonsense: x", "fleetmedic: no colon", "fleetmedic:", None, ""],
)
def test_parse_refuses_what_is_not_our_format(reason):
    assert parse_reason(reason) is None


def test_format_refuses_unknown_rungs_and_bad_prefixes():
    with pytest.raises(ValueError, match="unknown rung"):
        format_reason("reinstall", "x")
    for bad in ("", " fm:", "fm:\n"):
        with pytest.raises(ValueError, match="bad Slurm reason prefix"):
            format_reason("reboot", "x", prefix=bad)
    assert not is_ours("fleetmedic: x", prefix="fm:")
