"""Dedup: one finding per (boot, PCI id, code) within a window; idempotent; replay-proof;
persistable."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetmedic.scan import Dedup, Finding


def finding(
    code=79,
    pci="0000:3b:00",
    t=100.0,
    clock="uptime",
    action="reboot",
    kind="xid",
    boot=None,
    rule="",
):
    return Finding(
        line=1,
        vendor="nvidia",
        kind=kind,
        code=code,
        pci=pci,
        action=action,
        bucket=None,
        message="m",
        time=t,
        clock=clock,
        boot_id=boot,
        rule=rule or f"{kind}.{code}",
    )


def test_same_identity_within_window_is_one_finding():
    dedup = Dedup(window=60)
    assert dedup.admit(finding(t=100))
    assert not dedup.admit(finding(t=130))
    assert not dedup.admit(finding(t=100))  # a replayed line
    assert dedup.admit(finding(t=161))  # a new window


def test_identity_parts_each_matter():
    dedup = Dedup(window=60)
    assert dedup.admit(finding())
    assert dedup.admit(finding(pci="0000:5a:00"))
    assert dedup.admit(finding(code=48))
    assert dedup.admit(finding(kind="sxid"))
    assert dedup.admit(finding(boot="b2"))
    assert dedup.admit(finding(), boot="segment-2")


def test_findings_without_code_use_their_rule():
    dedup = Dedup(window=60)
    assert dedup.admit(finding(code=None, kind="amdgpu", rule="amdgpu.gpu-reset"))
    assert dedup.admit(finding(code=None, kind="amdgpu", rule="amdgpu.ring-timeout"))
    assert not dedup.admit(finding(code=None, kind="amdgpu", rule="amdgpu.gpu-reset", t=101))


def test_fallen_off_the_bus_shares_xid_79_identity():
    dedup = Dedup()
    nvrm = Finding(
        line=1,
        vendor="nvidia",
        kind="nvrm",
        code=None,
        pci="0000:3b:00",
        action="reboot",
        bucket="RESTART_BM",
        message="m",
        time=100.0,
        clock="uptime",
        rule="nvrm.fallen-off-bus",
        dedup_kind="xid",
        dedup_code="79",
    )
    assert dedup.admit(finding(t=99))
    assert not dedup.admit(nvrm)


def test_a_stronger_action_passes_and_raises_the_bar():
    dedup = Dedup(window=60)
    assert dedup.admit(finding(kind="sxid", code=99999, action="monitor", t=10))
    assert dedup.admit(finding(kind="sxid", code=99999, action="reboot", t=11))
    assert not dedup.admit(finding(kind="sxid", code=99999, action="monitor", t=12))
    assert not dedup.admit(finding(kind="sxid", code=99999, action="reboot", t=13))


def test_replay_guard_drops_older_lines_even_when_forgotten():
    dedup = Dedup(window=60, replay_guard=True, max_entries=1)
    assert dedup.admit(finding(code=13, t=10, boot="b"))
    assert dedup.admit(finding(code=79, t=500, boot="b"))  # evicts code 13 (max_entries=1)
    assert not dedup.admit(finding(code=13, t=10, boot="b"))  # replayed: older than the newest seen
    assert dedup.admit(finding(code=13, t=600, boot="b"))
    assert dedup.admit(finding(code=13, t=10, boot="other-boot"))


def test_without_timestamps_the_scan_clock_times_findings():
    now = [1000.0]
    dedup = Dedup(window=60, clock=lambda: now[0])
    assert dedup.admit(finding(t=None, clock=None))
    now[0] += 30
    assert not dedup.admit(finding(t=None, clock=None))
    now[0] += 31
    assert dedup.admit(finding(t=None, clock=None))


def test_state_round_trips_through_json():
    dedup = Dedup(window=60, replay_guard=True)
    dedup.admit(finding(t=100, boot="b"))
    dedup.admit(finding(code=48, t=120, boot="b"))
    restored = Dedup.from_state(json.loads(json.dumps(dedup.to_state())))
    assert restored.to_state() == dedup.to_state()
    assert not restored.admit(finding(t=100, boot="b"))
    assert not restored.admit(finding(code=13, t=50, boot="b"))  # replay guard survived
    assert restored.admit(finding(code=13, t=200, boot="b"))


def test_bad_state_gives_an_empty_dedup():
    for bad in ({"seen": [[1, 2]]}, {"window": "x"}, {"newest": "nope"}):
        restored = Dedup.from_state(bad)
        assert len(restored) == 0


def test_forget_other_boots():
    dedup = Dedup()
    dedup.admit(finding(boot="old"))
    dedup.admit(finding(boot="new"))
    dedup.forget_boots_except("new")
    assert len(dedup) == 1
    assert dedup.admit(finding(boot="old"))


_findings = st.builds(
    finding,
    code=st.sampled_from([13, 48, 79, None]),
    pci=st.sampled_from(["0000:3b:00", "0000:5a:00", None]),
    t=st.one_of(st.none(), st.floats(0, 10_000, allow_nan=False)),
    clock=st.sampled_from(["uptime", "wall"]),
    action=st.sampled_from(["none", "monitor", "reboot", "manual"]),
    kind=st.sampled_from(["xid", "sxid"]),
    boot=st.sampled_from([None, "a", "b"]),
)


def _run(dedup_factory, items):
    dedup = dedup_factory()
    return [f for f in items if dedup.admit(f)]


@settings(max_examples=300, deadline=None)
@given(st.lists(_findings, max_size=40), st.floats(0, 5000), st.booleans())
def test_dedup_is_idempotent(items, window, guard):
    def factory():
        return Dedup(window=window, replay_guard=guard, clock=lambda: 42.0)

    once = _run(factory, items)
    assert _run(factory, once) == once


@settings(max_examples=200, deadline=None)
@given(st.lists(_findings, max_size=40))
def test_a_replay_never_retriggers(items):
    dedup = Dedup(window=3600, replay_guard=True, clock=lambda: 42.0)
    timed = [f for f in items if f.time is not None]
    list(dedup.filter(timed))
    assert list(dedup.filter(timed)) == []
