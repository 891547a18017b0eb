"""Dedup: one finding per (boot, PCI id, code) within a window.

A kernel ring buffer or a journal replayed after an agent restart repeats old
lines; an Xid storm repeats one fault many times. :class:`Dedup` passes the
first finding of each identity and drops the rest, so nothing re-triggers.

Identity: ``(boot, pci, kind, code)`` where ``kind``/``code`` come from
:meth:`Finding.identity` (a rule id stands in for findings without a numeric
code; a "fallen off the bus" line without an Xid shares Xid 79's identity).

A finding is dropped when:

- its identity was passed before and its time is within ``window`` seconds
  of that first one (either direction), and its action is not stronger; or
- ``replay_guard`` is on (the caller knows the boot id) and its time is
  older than the newest finding passed for that boot and clock: it is a
  replay of the buffer.

Times on different clocks (a kmsg ``uptime`` and a journal ``wall`` stamp)
cannot be compared: a repeat seen on another clock counts as a repeat.

A stronger action for the same identity always passes (an SXid's "Data"
line, then its "Fatal" line) and raises the bar for later ones. A finding
without a timestamp is timed by ``clock()`` (wall time by default).

The state only changes when a finding passes, which makes dedup idempotent:
running it over its own output passes everything again. It serialises to a
small JSON-able dict (:meth:`to_state` / :meth:`from_state`) so the agent can
keep it across restarts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fleetmedic.scan.finding import ACTION_RANK, Finding

DEFAULT_WINDOW = 3600.0
"""Seconds within which a repeat is the same finding. An hour folds an Xid
storm and a replayed buffer into one finding while a fault that persists is
still reported again each hour (the agent's strikes count those)."""

DEFAULT_MAX_ENTRIES = 10_000
"""Identities kept; beyond this the oldest are forgotten. A node with more
distinct faults than this in one window has bigger problems."""

_SCAN_CLOCK = "scan"


class Dedup:
    """Dedup state. Use :meth:`admit` per finding, or :meth:`filter` for a stream."""

    def __init__(
        self,
        window: float = DEFAULT_WINDOW,
        *,
        replay_guard: bool = False,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if window < 0:
            raise ValueError("dedup window must be >= 0 seconds")
        self.window = float(window)
        self.replay_guard = replay_guard
        self.max_entries = max_entries
        self._clock = clock
        # identity -> [clock name, first time, action rank]
        self._seen: dict[tuple[str, str, str, str], list[Any]] = {}
        # (boot, clock name) -> newest time passed
        self._newest: dict[tuple[str, str], float] = {}

    def admit(self, finding: Finding, boot: str | None = None) -> bool:
        """True if ``finding`` is new (and remember it); False if it is a repeat.

        ``boot`` defaults to ``finding.boot_id``; pass it when the caller
        tracks boots itself (the scanner's boot segments).
        """
        boot_key = boot if boot is not None else (finding.boot_id or "")
        return self.admit_identity(
            boot_key, finding.identity(), finding.time, finding.clock, ACTION_RANK[finding.action]
        )

    def admit_identity(
        self,
        boot: str,
        identity: tuple[str, str, str],
        when: float | None,
        clock: str | None,
        rank: int,
    ) -> bool:
        """:meth:`admit` for a finding not built yet: its :meth:`Finding.identity`, time,
        clock and action rank (the scanner builds only the findings that pass)."""
        if when is None or clock is None:
            when, clock = self._clock(), _SCAN_CLOCK
        key = (boot, *identity)
        seen = self._seen.get(key)
        if (
            seen is not None
            and rank <= seen[2]
            and (seen[0] != clock or abs(when - seen[1]) < self.window)
        ):
            return False
        newest = self._newest.get((boot, clock))
        if self.replay_guard and clock != _SCAN_CLOCK and newest is not None and when < newest:
            return False
        if (
            seen is not None
            and rank > seen[2]
            and (seen[0] != clock or abs(when - seen[1]) < self.window)
        ):
            seen[2] = rank  # escalation inside the window: keep the window's start
        else:
            self._seen[key] = [clock, when, rank]
        if newest is None or when > newest:
            self._newest[(boot, clock)] = when
        if len(self._seen) > self.max_entries:
            self._evict()
        return True

    def filter(self, findings: Iterable[Finding]) -> Iterator[Finding]:
        """The findings that :meth:`admit` passes, in order."""
        return (finding for finding in findings if self.admit(finding))

    def forget_boots_except(self, boot_id: str) -> None:
        """Drop state of every other boot (the agent calls this after a reboot)."""
        self._seen = {k: v for k, v in self._seen.items() if k[0] == boot_id}
        self._newest = {k: v for k, v in self._newest.items() if k[0] == boot_id}

    def _evict(self) -> None:
        ordered = sorted(self._seen.items(), key=lambda item: item[1][1])
        self._seen = dict(ordered[len(ordered) - self.max_entries :])

    def __len__(self) -> int:
        return len(self._seen)

    def to_state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot (see :meth:`from_state`)."""
        return {
            "version": 1,
            "window": self.window,
            "replay_guard": self.replay_guard,
            "seen": [[*key, *value] for key, value in self._seen.items()],
            "newest": [[boot, clock, when] for (boot, clock), when in self._newest.items()],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], *, clock: Callable[[], float] = time.time) -> Dedup:
        """Rebuild a :class:`Dedup` from :meth:`to_state`; a bad state gives an empty one.

        An unreadable snapshot must not stop the agent: losing dedup state
        only costs repeated findings for the current boot (and the replay
        guard still holds for new ones).
        """
        try:
            dedup = cls(
                float(state.get("window", DEFAULT_WINDOW)),
                replay_guard=bool(state.get("replay_guard", False)),
                clock=clock,
            )
            for boot, pci, kind, code, clock_name, when, rank in state.get("seen", ()):
                dedup._seen[(str(boot), str(pci), str(kind), str(code))] = [
                    str(clock_name),
                    float(when),
                    int(rank),
                ]
            for boot, clock_name, when in state.get("newest", ()):
                dedup._newest[(str(boot), str(clock_name))] = float(when)
            return dedup
        except (TypeError, ValueError, AttributeError):
            return cls(clock=clock)
