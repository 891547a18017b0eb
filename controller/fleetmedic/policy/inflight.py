"""The in-flight marker (``fleetmedic.io/in-flight``) and the escalation record
(``fleetmedic.io/escalated``): what makes a restart safe.

The controller writes the in-flight marker *before* it acts and updates it
*after*, each time in the same Node write as the taint change. So after a crash
the Node says which phase was under way:

- ``status: pending``: the phase has not started; start it.
- ``status: running``: it started and its end was never recorded. Diagnose,
  drain, reinstall and verify are idempotent and simply run again. A reboot is
  not: before it starts, the node's ``boot_id`` is stored here (as the attempt's
  diagnose read it, else read by a probe), so a probe after the restart tells
  whether the node booted since (boot_id changed: go on to verify), did not (same
  boot_id: run it again) or is still under way (unreachable: probe again until
  the reboot timeout, then it failed).

The escalation record is written when the escalation is *decided*, before the
email is sent, so it is decided exactly once per episode and a failed or
interrupted send is retried from the record, never silently lost.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from fleetmedic.model import keys
from fleetmedic.policy.history import parse_time

PENDING, RUNNING = "pending", "running"
ESCALATE_PHASE = "escalate"


@dataclasses.dataclass(frozen=True)
class InFlight:
    ep: int  # episode (see history.py)
    step: str  # reboot | reimage | manual
    attempt: int  # 1-based attempt of the step in this episode
    phase: str  # diagnose | drain | reinstall | reboot | verify | escalate
    status: str  # pending | running
    step_start: str  # when this attempt began
    since: str  # when status last changed
    run_id: str | None = None  # the run of the current phase, known before it starts
    boot_id: str | None = None  # boot_id before the booting phase (diagnose's or a probe's)
    retry_at: str | None = None  # do nothing before this time (probe/drain back-off)
    notes: tuple[str, ...] = ()  # things worth keeping for the attempt's history message

    def encode(self) -> str:
        data = {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, (), [])}
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str | None) -> InFlight | None:
        """None when absent; ValueError when present but unreadable (never guess)."""
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            record = cls(**{**data, "notes": tuple(data.get("notes", ()))})
        except (ValueError, TypeError) as exc:
            raise ValueError(f"unreadable in-flight record: {exc}") from None
        if record.status not in (PENDING, RUNNING) or parse_time(record.since) is None:
            raise ValueError(f"unreadable in-flight record: {raw[:80]}")
        return record

    @classmethod
    def read(cls, annotations: Mapping[str, str]) -> InFlight | None:
        """The marker in ``annotations``; None when absent *or unreadable*. For readers
        that only report it (status, release); deciders use decode(), which never guesses."""
        try:
            return cls.decode(annotations.get(keys.ANN_IN_FLIGHT))
        except ValueError:
            return None

    def with_(self, **changes: Any) -> InFlight:
        return dataclasses.replace(self, **changes)

    def retry_time(self) -> datetime | None:
        return parse_time(self.retry_at)

    def since_time(self) -> datetime:
        return parse_time(self.since)  # type: ignore[return-value]  # checked in decode


@dataclasses.dataclass(frozen=True)
class Escalated:
    ep: int
    decided: str  # when the escalation was decided (once)
    sent: str | None = None  # when the email went out; None: still to send
    tries: int = 0
    error: str = ""
    retry_at: str | None = None

    def encode(self) -> str:
        data = {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, "")}
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str | None) -> Escalated | None:
        """Tolerant: a malformed record still counts as decided (never email twice)."""
        if raw is None:
            return None
        try:
            return cls(**json.loads(raw))
        except (ValueError, TypeError):
            return cls(ep=0, decided="", sent="unknown")

    def with_(self, **changes: Any) -> Escalated:
        return dataclasses.replace(self, **changes)

    def retry_time(self) -> datetime | None:
        return parse_time(self.retry_at)
