"""Has slurmctld saved a node's record yet? Read from its own state files.

slurmctld answers ``scontrol update`` at once and saves its node table later, from one
state-save thread (``src/slurmctld/state_save.c``, the same in 22.05, 23.02, 23.11, 24.05,
24.11, 25.05 and 26.05): a save runs when something changed and the last one is at least
``SAVE_MAX_WAIT`` (5 s, a compile-time constant) old, checked once a second, and it writes
the job table before the node table. So an update that follows another save within 5 s
reaches the disk up to ~6 s later, and later still while a big job table is written
(measured here on 22.05: 3-27 ms after a quiet spell, 4.4-4.8 s after a recent save). A
slurmctld killed in between comes back without it.

No client request tells whether, or when, slurmctld saved: there is no RPC that reports
or forces a state save in these versions (sdiag reports RPCs, the agent queue and the
schedulers, not saves; ``scontrol reconfigure`` schedules saves as any update does, and is
far too heavy to send per repair; ``scontrol takeover`` is for a backup controller). What
does tell is the saved file itself: ``<StateSaveLocation>/node_state`` holds every node's
Extra as it was packed (``packstr``: the bytes as they are), written whole to
``node_state.new`` and then put in place: linked up to 24.11, renamed in 26.05
(``save_buf_to_state`` in src/common/state_save.c: ``node_state`` renamed to
``node_state.old``, then ``node_state.new`` to ``node_state``). Either way ``node_state``
is missing for a moment, while ``node_state.new`` is complete; in 26.05 both can be
missing between our two reads, which reads as "not yet" and the wait asks again. So
:meth:`SaveCheck.saved` asks whether the node's Extra, as slurmctld answers it now, is in
that file. Extra holds our in-flight record with its own time and run id, so a match is
this record, not an older one.

That needs the file: the bastion must be the slurmctld host, or mount the
StateSaveLocation that an HA pair shares anyway, and the controller must be able to read
files slurmctld creates with mode 0600 (run as root or SlurmUser). Where it cannot,
:meth:`SaveCheck.usable` says why and the caller waits out :data:`SAVE_WINDOW_S` instead,
which 5 s of ``SAVE_MAX_WAIT`` plus the 1 s wake-up explain, but which a slow save of a
big job table can outlast.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fleetmedic.errors import TemporaryError

SAVE_WINDOW_S = 6.0
"""Seconds after an update within which slurmctld may not have saved it yet, where its
state files cannot be read: SAVE_MAX_WAIT (5 s) plus the save thread's 1 s wake-up."""
STATE_FILE = "node_state"


class SaveCheck:
    """Reads ``node_state`` under ``location`` (slurmctld's StateSaveLocation)."""

    def __init__(self, location: Path | None, why_not: str = "") -> None:
        self.location = location
        self.why_not = why_not if location is None else ""

    @classmethod
    def at(cls, location: str | Path | None) -> SaveCheck:
        """A check on ``location``, or none (with the reason) when its state file cannot be
        read from here."""
        if not location:
            return cls(None, "StateSaveLocation unknown")
        path = Path(location)
        state = path / STATE_FILE
        if not state.exists():
            return cls(None, f"{state}: not here (is this bastion the slurmctld host?)")
        if not os.access(state, os.R_OK):
            return cls(None, f"{state}: not readable by this user (slurmctld makes it 0600)")
        return cls(path)

    @property
    def usable(self) -> bool:
        return self.location is not None

    def saved(self, extra: str) -> bool:
        """True when ``extra`` (a node's Extra as slurmctld answers it) is in the saved
        node table. An empty Extra is never looked for (it is saved as no bytes at all)."""
        if self.location is None:
            raise RuntimeError(f"no save check: {self.why_not}")
        if not extra:
            return True
        want = extra.encode()
        for name in (STATE_FILE, f"{STATE_FILE}.new"):  # (see the module doc)
            try:
                data = (self.location / name).read_bytes()
            except FileNotFoundError:
                continue
            return want in data
        return False


SAVE_TIMEOUT = 60.0
"""Longest wait for a save before the caller gives up for now (TemporaryError): ten
save intervals; a slurmctld that saves nothing for a minute has a sick disk."""


def wait(
    check: SaveCheck,
    extra: Callable[[], str],
    written: float,
    cancel: threading.Event,
    *,
    timeout: float = SAVE_TIMEOUT,
    poll: float = 0.1,
    clock: Callable[[], float] = time.time,
) -> bool:
    """Return once slurmctld has saved the node's Extra as ``extra()`` reads it now (True),
    or when ``cancel`` is set (False). Without a usable ``check``: once
    :data:`SAVE_WINDOW_S` has passed since ``written`` (epoch seconds of the update). A
    save that does not come within ``timeout`` raises TemporaryError: nothing must start
    that a slurmctld crash could make us repeat."""
    if not check.usable:
        left = SAVE_WINDOW_S - (clock() - written)
        return not (left > 0 and cancel.wait(left))
    text = extra()
    deadline = clock() + timeout
    while not check.saved(text):
        if clock() >= deadline:
            raise TemporaryError(
                f"slurmctld has not saved the node's record in {timeout:.0f}s "
                f"({check.location}/{STATE_FILE} does not hold it yet): waiting to act",
                delay=10,
            )
        if cancel.wait(poll):
            return False
    return True
