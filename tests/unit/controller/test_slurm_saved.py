"""The Slurm kind's settle (kinds/slurm.py ``saved``): a disruptive phase on a Slurm node
starts only once slurmctld has saved the in-flight record that says it began (it saves an
update up to ~6 s after it answers; a crash in between would let the next controller
repeat a reboot). Here without slurmctld's state file (the record's age against the save
window); the check on the real file is in tests/integration/test_slurm_steps.py."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from fleetmedic.adapters.slurmsave import SAVE_WINDOW_S, SaveCheck, wait
from fleetmedic.errors import Cancelled
from fleetmedic.kinds.slurm import saved
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import view
from fleetmedic.policy.history import stamp
from fleetmedic.policy.inflight import RUNNING, InFlight


def no_state_file(name: str, written: float, cancel: threading.Event) -> bool:
    return wait(SaveCheck(None, "not here"), lambda: "", written, cancel)


def running_since(seconds_ago: float):
    since = stamp(datetime.now(UTC) - timedelta(seconds=seconds_ago))
    fl = InFlight(ep=1, step="reboot", attempt=1, phase="reboot", status=RUNNING,
                  step_start=since, since=since)  # fmt: skip
    node = {"metadata": {"name": "n1", "annotations": {keys.ANN_IN_FLIGHT: fl.encode()}}}
    return view(node, Config().vocabulary())


def test_a_phase_that_just_began_waits_out_the_save_window():
    t0 = time.monotonic()
    written = saved(running_since(0), threading.Event(), no_state_file)
    waited = time.monotonic() - t0
    # `since` has whole seconds: up to one second of the window may already be over
    assert SAVE_WINDOW_S - 1.1 <= waited <= SAVE_WINDOW_S + 1, waited
    assert abs(written - time.time()) <= SAVE_WINDOW_S + 1


def test_a_resumed_phase_whose_record_is_old_starts_at_once():
    t0 = time.monotonic()
    written = saved(running_since(60), threading.Event(), no_state_file)
    assert time.monotonic() - t0 < 0.5
    assert 58 <= time.time() - written <= 62


def test_stopping_during_the_wait_abandons_the_phase_before_it_began():
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    with pytest.raises(Cancelled, match="before the disruptive phase began"):
        saved(running_since(0), cancel, no_state_file)
