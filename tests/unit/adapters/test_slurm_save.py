"""adapters/slurmsave.py: a disruptive phase on a Slurm node starts only once slurmctld has
saved the record that says it began. Where slurmctld's node_state file can be read, the
wait ends when the record's bytes are in it; elsewhere it waits out Slurm's save interval
from the record's time. The real slurmctld's file is read in
tests/integration/test_slurm_steps.py (and its saves frozen there, to show the crash it
prevents)."""

from __future__ import annotations

import threading
import time

import pytest

from fleetmedic.adapters.slurmsave import SAVE_WINDOW_S, STATE_FILE, SaveCheck, wait
from fleetmedic.errors import TemporaryError

RECORD = '{"fleetmedic":{"fleetmedic.io/in-flight":"{\\"phase\\":\\"reboot\\"}"}}'


def packed(*extras: str) -> bytes:
    """A stand-in for slurmctld's packed node table: each string as packstr packs it."""
    out = b"PROT_VERSION\x00"
    for e in extras:
        raw = e.encode() + b"\x00"
        out += len(raw).to_bytes(4, "big") + raw
    return out


def test_without_the_state_file_the_phase_waits_out_the_save_window():
    t0 = time.monotonic()
    assert wait(SaveCheck(None, "not here"), lambda: RECORD, time.time(), threading.Event())
    assert SAVE_WINDOW_S - 0.2 <= time.monotonic() - t0 <= SAVE_WINDOW_S + 1


def test_without_the_state_file_an_old_record_starts_at_once():
    t0 = time.monotonic()
    assert wait(SaveCheck(None, "x"), lambda: RECORD, time.time() - 60, threading.Event())
    assert time.monotonic() - t0 < 0.5


def test_stopping_during_the_window_abandons_the_phase():
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    t0 = time.monotonic()
    assert not wait(SaveCheck(None, "x"), lambda: RECORD, time.time(), cancel)
    assert time.monotonic() - t0 < 2


def test_with_the_state_file_the_phase_waits_until_the_record_is_in_it(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(packed("", '{"site":1}'))
    check = SaveCheck.at(tmp_path)
    assert check.usable

    def save_later() -> None:
        time.sleep(0.5)
        tmp = tmp_path / f"{STATE_FILE}.new"
        tmp.write_bytes(packed(RECORD, '{"site":1}'))
        tmp.replace(tmp_path / STATE_FILE)

    threading.Thread(target=save_later).start()
    t0 = time.monotonic()
    assert wait(check, lambda: RECORD, time.time() - 600, threading.Event(), poll=0.02)
    assert 0.45 <= time.monotonic() - t0 < 3, "neither before the save nor long after"


def test_a_record_already_saved_starts_at_once_however_new(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(packed(RECORD))
    t0 = time.monotonic()
    assert wait(SaveCheck.at(tmp_path), lambda: RECORD, time.time(), threading.Event())
    assert time.monotonic() - t0 < 0.5


def test_between_slurmctlds_unlink_and_link_the_new_file_is_read(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(b"")
    check = SaveCheck.at(tmp_path)
    (tmp_path / STATE_FILE).unlink()
    (tmp_path / f"{STATE_FILE}.new").write_bytes(packed(RECORD))
    assert check.saved(RECORD)
    (tmp_path / f"{STATE_FILE}.new").unlink()
    assert not check.saved(RECORD)


def test_a_save_that_never_comes_stops_the_phase_for_now(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(packed("old"))
    with pytest.raises(TemporaryError, match="has not saved the node's record"):
        wait(SaveCheck.at(tmp_path), lambda: RECORD, 0, threading.Event(), timeout=0.3)


def test_stopping_while_waiting_for_the_save_abandons_the_phase(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(packed("old"))
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    assert not wait(SaveCheck.at(tmp_path), lambda: RECORD, 0, cancel)


@pytest.mark.parametrize("where", [None, "", "/nonexistent/fleetmedic-state"])
def test_a_location_that_cannot_be_read_says_why_in_one_line(where):
    check = SaveCheck.at(where)
    assert not check.usable and check.why_not and "\n" not in check.why_not
