"""Ticket hand-off: the RMA case of each lemon, sent once to the ``ticket:`` webhook
through the outbox (controller/outbox.py, the ``ticket`` channel of controller/channels.py),
the one path every notification takes.

Two records, each with one job:

- the node's ``fleetmedic.io/rma`` record (policy/rmaflow.py), written when the lemon rule
  decided: ``ticket: pending`` means "to send", ``sent`` (with the receiver's issue keys)
  or ``failed`` (with why) that it ended; ``fleetmedic status`` and ``history`` read it;
- the outbox's letter, one ``once`` letter per GPU's case, kept on the pause ConfigMap
  until it is delivered, retried every ``ticket.retry_interval`` up to ``ticket.tries``,
  and remembered after delivery (its tombstone), so it is never sent twice.

This part looks at every cycle's views: a node whose escalation is decided (the ticket
goes with the email, in the cycle that decided it) and whose record says ``pending`` gets
its letters posted (a no-op for a letter pending or delivered already); the end of each
(the outbox tells this part: :meth:`~fleetmedic.controller.outbox.Outbox.listen`) is
written to the Node on the worker pool. A controller killed anywhere: the record still
says pending, so the next one posts again, and the outbox's record (or tombstone) makes
that the same letter, sent once. Delivery is at least once in one window (the receiver's
answer and the outbox's tombstone, one HTTP round trip): the case id goes along as
``Idempotency-Key`` so a receiver can drop the repeat.

A refused case (the receiver answers 4xx), a template that renders no JSON, or the last
of ``ticket.tries`` is recorded as ``failed`` with the reason; the email still carries
the case. A controller killed after a letter ended and before the Node says so: the next
one reads the end from the outbox's tombstone (the issue key, or why it was given up), so
the record says what the first would have written, and nothing is posted again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from fleetmedic.controller import channels
from fleetmedic.controller.outbox import Letter, Outbox
from fleetmedic.controller.parts import Look, Part
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.actions import Event, Stale, Update
from fleetmedic.policy.history import short, stamp
from fleetmedic.policy.profiles import assign
from fleetmedic.policy.rmaflow import TICKET_OFF, TICKET_PENDING, TICKET_SENT, RmaRecord

log = logging.getLogger(__name__)

FAILED = "failed"
Write = Callable[[Update], object]


@dataclasses.dataclass(frozen=True)
class _Change:
    """What to write on a node's record, and the letters whose end it records."""

    record: RmaRecord
    said: str = ""
    warn: bool = False
    letters: tuple[str, ...] = ()


class Ticketer(Part):
    """The loop's part (controller/parts.py) that posts the RMA tickets due at each cycle's
    look and records their ends, while this controller acts (``acting``: it leads, not a
    dry run). ``wake``: the loop looks again (a letter ended: its record is due)."""

    name = "tickets"

    def __init__(
        self,
        cfg: Config,
        write: Write,
        submit: Callable[[Callable[[], object]], None],
        outbox: Outbox,
        clock: Callable[[], datetime],
        acting: Callable[[], bool] = lambda: True,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.cfg, self.write, self.submit, self.outbox = cfg, write, submit, outbox
        self.clock, self.acting, self.wake = clock, acting, wake
        self._ended: dict[str, tuple[bool, str]] = {}  # letter id -> (sent, note)
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        outbox.listen(self._heard)

    def observe(self, look: Look) -> None:
        if self.acting():
            self.due(look.views, look.now)

    def due(self, views: Sequence[NodeView], now: datetime) -> list[str]:
        """Post the letters of the cases due; the nodes whose record is being written."""
        written = []
        for v in views:
            raw = v.annotations.get(keys.ANN_RMA)
            rec = RmaRecord.decode(raw) if raw else None
            if (
                rec is None
                or rec.ticket != TICKET_PENDING
                or keys.ANN_ESCALATED not in v.annotations
            ):
                continue
            with self._lock:
                if v.name in self._busy:
                    continue
            change = self._progress(v, rec, now)
            if change is None:
                continue
            with self._lock:
                self._busy.add(v.name)
            written.append(v.name)
            self.submit(functools.partial(self._record, v, raw, change))
        return written

    def busy(self) -> set[str]:
        with self._lock:
            return set(self._busy)

    def _heard(self, letter: Letter, sent: bool, note: str) -> None:
        """A letter ended (on the outbox's thread): its record is written at the next look."""
        if letter.channel != "ticket":
            return
        with self._lock:
            self._ended[letter.id] = (sent, note)
        self.wake()

    def _progress(self, view: NodeView, rec: RmaRecord, now: datetime) -> _Change | None:
        """Post what is still to send; what the record says from now (None: as it is)."""
        profile = assign([view], self.cfg).profile_of.get(view.name, "default")
        target = self.cfg.profile(profile).ticket
        if target is None:
            return _Change(rec.with_(ticket=TICKET_OFF), "no ticket target in the config")
        done = dict(d.split("=", 1) for d in rec.ticket_id.split(",") if "=" in d)
        failed: list[str] = []
        ended: list[str] = []
        for case in cases_of(rec, view):
            serial = str((case.get("gpu") or {}).get("serial") or case.get("case_id"))
            if serial in done:
                continue
            letter = channels.ticket_to(target, view.name, serial, case, profile=profile)
            with self._lock:
                end = self._ended.get(letter.id)
            if end is None and (tomb := self.outbox.ended(letter.id)):
                end = (tomb.sent, tomb.note)  # ended before a restart: its tombstone says so
            if end is None:
                self.outbox.post(letter)  # (a no-op while it is pending)
                continue
            ended.append(letter.id)
            sent, note = end
            if sent:
                done[serial] = "" if note == "accepted" else note
            else:
                failed.append(f"GPU {serial}: {note}")
        issues = ",".join(f"{s}={i}" for s, i in done.items())
        if failed:
            why = short("; ".join(failed))
            log.error("%s: RMA ticket not accepted: %s", view.name, why)
            new = rec.with_(ticket=FAILED, ticket_error=why, ticket_id=issues, ticket_at=stamp(now))
            return _Change(new, f"ticket not accepted: {why}", True, tuple(ended))
        if len(done) >= len(rec.gpus):
            new = rec.with_(
                ticket=TICKET_SENT, ticket_at=stamp(now), ticket_error="", ticket_id=issues
            )
            said = ", ".join(f"{s}={i}" if i else s for s, i in done.items())
            return _Change(new, f"RMA ticket sent to {target.name}: {said}", False, tuple(ended))
        if ended:  # some GPUs' cases delivered, others still on their way
            return _Change(rec.with_(ticket_id=issues), letters=tuple(ended))
        return None

    def _record(self, view: NodeView, raw: str | None, change: _Change) -> None:
        level = "Warning" if change.warn else "Normal"
        events = (Event("RMATicket", short(change.said), level),) if change.said else ()
        try:
            self.write(
                Update(
                    node=view.name,
                    at=stamp(self.clock()),
                    annotations={keys.ANN_RMA: change.record.encode()},
                    expect_annotations={keys.ANN_RMA: raw},
                    events=events,
                )
            )
            with self._lock:
                for letter_id in change.letters:
                    self._ended.pop(letter_id, None)
        except Stale as exc:
            log.info("%s: ticket: %s; looking again", view.name, exc)
        except Exception:  # a bug here must not kill the worker pool
            log.exception("%s: recording the RMA ticket failed unexpectedly", view.name)
        finally:
            with self._lock:
                self._busy.discard(view.name)


def cases_of(rec: RmaRecord, view: NodeView) -> list[dict[str, Any]]:
    """Each GPU's case: its case file as written (controller/rmacase.py), else what the
    record itself says (the file was not written: the ticket still goes)."""
    out = []
    files = {Path(c).name: c for c in rec.cases}
    for gpu in rec.gpus:
        serial = str(gpu.get("serial") or gpu.get("uid"))
        path = next((p for n, p in files.items() if n.endswith(f"-rma-{_safe(serial)}.json")), None)
        case = _read(path) if path else None
        out.append(case or _minimal(rec, view, gpu))
    return out


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _read(path: str) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _minimal(rec: RmaRecord, view: NodeView, gpu: Any) -> dict[str, Any]:
    serial = gpu.get("serial") or gpu.get("uid")
    return {
        "kind": "fleetmedic.io/rma-case/v1",
        "case_id": rec.case_id,
        "recommendation": f"RMA candidate: GPU {serial}",
        "summary": rec.summary,
        "node": {"name": view.name, "address": view.address, "vendor": view.vendor},
        "gpu": {"serial": gpu.get("serial"), "uuid": gpu.get("uid"), "index": gpu.get("index")},
        "rule": {"family": gpu.get("family"), "episodes": gpu.get("count")},
        "history": [
            {
                "at": c.get("at"),
                "node": c.get("node"),
                "ep": c.get("ep"),
                "fam": gpu.get("family"),
                "why": c.get("why"),
            }
            for c in gpu.get("chain") or ()
        ],
        "evidence": {"bundles": list(rec.cases), "note": "the case file was not written"},
    }
