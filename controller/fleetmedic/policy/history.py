"""The attempts record kept in the ``fleetmedic.io/history`` annotation.

One entry per finished attempt of a ladder step (and per human or automatic
event that ends one: escalation, release, supersession). Entries carry an
episode number ``ep``: an episode is one trip from healthy into the ladder and
out again, so retries, flap damping and "exactly one email" can be counted per
episode. The list is bounded (oldest first out) so the annotation stays a few
KB; a malformed entry is dropped rather than failing the node.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MESSAGE_LIMIT = 240  # characters kept per message: the annotation must stay small

# results that end an attempt
PASS, FAIL, UNREACHABLE, TIMEOUT = "pass", "fail", "unreachable", "timeout"
ESCALATED, FLAP_DAMPED, SUPERSEDED, RELEASED = "escalated", "flap-damped", "superseded", "released"
DRAIN_BLOCKED, ABANDONED = "drain-blocked", "abandoned"
REPLACED = "replaced"  # a terminal step handed the node to its cloud: its life ended


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime(TIME_FORMAT)


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def short(message: str) -> str:
    one_line = " ".join(str(message).split())
    return one_line if len(one_line) <= MESSAGE_LIMIT else one_line[: MESSAGE_LIMIT - 1] + "…"


@dataclasses.dataclass(frozen=True)
class Attempt:
    ep: int  # episode number, 1-based, grows per node
    step: str  # reboot | reimage | manual
    attempt: int  # 1-based attempt of this step within the episode
    start: str  # RFC 3339 UTC
    end: str  # RFC 3339 UTC
    result: str  # pass | fail | unreachable | timeout | escalated | ...
    phase: str | None = None  # the phase it ended in (where it failed)
    run_id: str | None = None  # the ansible-runner run of that phase
    message: str = ""
    fault: str | None = None  # on a pass: the fault it cured (policy/quarantine.py fault_of)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return {k: v for k, v in data.items() if v not in (None, "")}

    @classmethod
    def from_json(cls, data: Any) -> Attempt | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                ep=int(data["ep"]),
                step=str(data["step"]),
                attempt=int(data["attempt"]),
                start=str(data["start"]),
                end=str(data["end"]),
                result=str(data["result"]),
                phase=data.get("phase"),
                run_id=data.get("run_id"),
                message=str(data.get("message", "")),
                fault=str(data["fault"]) if data.get("fault") else None,
            )
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def failed(self) -> bool:
        return self.result in (FAIL, UNREACHABLE, TIMEOUT, DRAIN_BLOCKED)


def decode(raw: str | None) -> list[Attempt]:
    """The history annotation as a list; missing or malformed parts read as empty."""
    if not raw:
        return []
    try:
        data = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    return [a for a in (Attempt.from_json(d) for d in data) if a is not None]


def encode(attempts: Iterable[Attempt]) -> str:
    return json.dumps([a.to_json() for a in attempts], separators=(",", ":"), ensure_ascii=False)


def append(attempts: list[Attempt], new: Iterable[Attempt], limit: int) -> list[Attempt]:
    return (list(attempts) + list(new))[-limit:]


def last_episode(attempts: Iterable[Attempt]) -> int:
    return max((a.ep for a in attempts), default=0)


def of_episode(attempts: Iterable[Attempt], ep: int) -> list[Attempt]:
    return [a for a in attempts if a.ep == ep]


def episode_starts(attempts: Iterable[Attempt]) -> dict[int, datetime]:
    """When each episode (still in the record) began: its earliest attempt's start."""
    starts: dict[int, datetime] = {}
    for a in attempts:
        t = parse_time(a.start)
        if t is not None and (a.ep not in starts or t < starts[a.ep]):
            starts[a.ep] = t
    return starts


def last_pass(attempts: Iterable[Attempt]) -> datetime | None:
    ends = [parse_time(a.end) for a in attempts if a.result == PASS]
    return max((t for t in ends if t is not None), default=None)
