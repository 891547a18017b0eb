"""Flap damping: a node that keeps coming back goes straight to ``manual``.

A node that enters repair ``count`` times within ``window`` (this entry
included) is not being fixed by the ladder; another reboot only costs its
jobs. Episodes are counted from the history annotation, so the count survives
controller restarts and moves with the Node, not with the controller.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from fleetmedic.policy.history import Attempt, episode_starts


def recent_entries(attempts: Iterable[Attempt], now: datetime, window: float) -> int:
    """Episodes in the record that began within ``window`` seconds before ``now``."""
    since = now - timedelta(seconds=window)
    return sum(1 for start in episode_starts(attempts).values() if start >= since)


def damped(attempts: Iterable[Attempt], now: datetime, count: int, window: float) -> bool:
    """Would one more entry now be the ``count``-th within the window?"""
    return recent_entries(attempts, now, window) + 1 >= count


def reason(count: int, window: float) -> str:
    return f"entered repair {count} times within {human(window)}: the ladder is not fixing it"


def human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
