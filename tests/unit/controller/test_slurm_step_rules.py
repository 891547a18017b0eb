"""The pure parts of the Slurm ladder steps (kinds/slurmdrain.py, slurmreboot.py): the
boot-time rule, Slurm's notes on a reason, ownership, and the drain's one-line messages.
The steps themselves run against real Slurm daemons in tests/integration/test_slurm_steps.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.adapters.slurm import ForeignDrain, Slurm, SlurmNode
from fleetmedic.kinds.slurmdrain import SlurmDrainResult, _refusal, check_ours
from fleetmedic.kinds.slurmreboot import BOOT_TIME_JITTER, base_reason, is_new_boot
from fleetmedic.model.slurmreason import parse_reason

OURS = "fleetmedic: reboot: xid.79 0000:3b:00: GPU has fallen off the bus."


def node(state="idle", flags=("DRAIN",), reason=OURS) -> SlurmNode:
    return SlurmNode.from_json(
        {"name": "n1", "state": state, "state_flags": list(flags), "reason": reason}
    )


# -- when has a node rebooted -------------------------------------------------------------
def test_a_boot_after_the_request_is_new():
    assert is_new_boot(1003, 1000.4, before=990)
    assert is_new_boot(1003, 1000.4)  # a resumed controller: the boot before is unknown


def test_the_old_boot_seen_again_is_not_new():
    # re-registration moves the boot time by a second: never a reboot
    assert not is_new_boot(991, 1000.4, before=990)
    assert not is_new_boot(990, 1000.4)
    assert not is_new_boot(None, 1000.4, before=990)


def test_a_boot_time_equal_to_the_request_second_is_not_new():
    # slurmctld's boot time is whole seconds and may round a boot a moment after the
    # request down to it; a real reboot takes longer than that
    assert not is_new_boot(1000, 1000.0)
    assert not is_new_boot(1000, 1000.7)


def test_the_old_boot_a_moment_before_the_request_is_caught_by_the_boot_before():
    # a node booted 0.5 s before the request, re-registered with +1 s: after the request,
    # but not more than the jitter after the boot seen before it
    assert not is_new_boot(1001, 1000.6, before=1000)


@given(
    before=st.integers(1_000_000, 2_000_000),
    lag=st.floats(0.0, 10_000.0),
    shift=st.integers(-BOOT_TIME_JITTER, BOOT_TIME_JITTER),
)
def test_a_re_registration_is_never_a_reboot(before, lag, shift):
    """Whatever the request time after the boot, the old boot seen again (moved by the
    jitter) never counts as new when the boot before the request is known."""
    assert not is_new_boot(before + shift, before + lag, before=before)


# -- reasons ------------------------------------------------------------------------------
def test_slurms_notes_keep_the_reason_ours_at_the_same_rung():
    after = f"{OURS} : reboot issued : reboot complete"
    got = parse_reason(after)
    assert got is not None and got.rung == "reboot"
    assert base_reason(after) == OURS
    assert base_reason(f"{OURS} : reboot issued") == OURS
    assert base_reason(f"{OURS} : reboot issued : reboot timed out") == OURS
    assert base_reason(OURS) == OURS
    assert parse_reason("reboot timed out") is None


def test_check_ours_accepts_our_drain_and_down_with_our_reason():
    check_ours(node(), "fleetmedic:")
    check_ours(node("mixed"), "fleetmedic:")  # draining
    check_ours(node("down", (), f"{OURS} : reboot issued : reboot complete"), "fleetmedic:")


@pytest.mark.parametrize(
    ("n", "why"),
    [
        (node(reason="NHC: check_hw_eth failed"), "'NHC: check_hw_eth failed', set by"),
        (node(flags=(), reason=""), "carries no drain of ours"),
        (node(flags=(), reason=OURS), "carries no drain of ours"),  # resumed, reason kept
        (node("down", (), "reboot timed out"), "'reboot timed out'"),
        (node(reason="fleetmedic: frobnicate: x"), "not ours"),  # a rung we do not know
    ],
)
def test_check_ours_refuses_in_one_line(n, why):
    with pytest.raises(ForeignDrain) as exc:
        check_ours(n, "fleetmedic:")
    assert why in str(exc.value) and "\n" not in str(exc.value)


# -- the drain's result ---------------------------------------------------------------------
def test_a_complete_drain_says_which_jobs_ended():
    r = SlurmDrainResult(evicted=(), blocked=(), skipped=(), finished=("101",), seconds=34.2)
    assert r.status == "ok"
    assert r.message == "1 Slurm job(s) ended, in 34s"


def test_a_blocked_drain_names_at_most_five_jobs():
    jobs = tuple(str(j) for j in range(101, 108))
    r = SlurmDrainResult(evicted=(), blocked=jobs, skipped=(), seconds=600)
    assert r.status == "blocked"
    assert r.message.startswith("7 Slurm job(s) still running: 101, 102, 103, 104, 105 (+2 more); ")
    assert "pod" not in r.message


def test_a_forced_drain_names_the_requeued_and_the_refusing_jobs():
    r = SlurmDrainResult(
        evicted=("201",),
        blocked=(),
        skipped=(),
        refused=(("202", "Requested operation is presently disabled for job 202"),),
        seconds=61,
    )
    assert r.status == "blocked"
    assert r.message == (
        "1 Slurm job(s) refused requeue: 202 (Requested operation is presently disabled "
        "for job 202); 0 Slurm job(s) ended, 1 requeued (201), in 61s"
    )


def test_a_cancelled_drain_is_never_recorded_as_blocked():
    r = SlurmDrainResult(evicted=(), blocked=("5",), skipped=(), cancelled=True, seconds=3)
    assert r.status == "cancelled"
    assert r.message.startswith("drain abandoned (the controller is stopping); ")
    done = SlurmDrainResult(evicted=(), blocked=(), skipped=(), cancelled=True)
    assert done.status == "ok", "a drain that finished as the stop came is done"


def test_the_refusing_job_is_read_from_the_adapters_error_line():
    line = "scontrol requeue 17: Requested operation is presently disabled for job 17"
    assert _refusal(line) == ("17", "Requested operation is presently disabled for job 17")
    assert _refusal("something else") == ("?", "something else")


# -- the adapter's reboot refuses before any tool runs ----------------------------------------
@pytest.mark.parametrize(
    ("reason", "nextstate", "why"),
    [
        ("NHC: check_hw_ib failed", "down", "not one of ours"),
        (f"{OURS}\nRebootProgram=/bin/sh", "down", "not one of ours"),
        (OURS, "drain", "takes down or resume"),
    ],
)
def test_the_adapter_refuses_a_reboot_that_is_not_ours(tmp_path, reason, nextstate, why):
    slurm = Slurm(bin_dir=tmp_path)  # no tool there: a refusal must come before any run
    with pytest.raises(ValueError, match=why):
        slurm.reboot("n1", reason, nextstate)
