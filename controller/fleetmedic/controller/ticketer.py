"""Ticket hand-off: the RMA case of each lemon, POSTed once to the ``ticket:`` webhook.

Where the state lives: in the node's ``fleetmedic.io/rma`` record (policy/rmaflow.py),
written when the lemon rule decided. ``ticket: pending`` there means "to send"; this part
looks at every cycle's views, and for a node whose escalation is decided (the ticket goes
with the email, within the cycle that decided it) sends each GPU's case on the worker
pool, then writes ``sent`` (with the receiver's issue key) or, after a failed try, the
next try's time and the count. So a controller killed anywhere sends the pending case
after its restart, and a sent one never again; the one window left is between the
receiver's answer and the Node's write (one HTTP round trip), where the case would go
twice: it carries its case id as ``Idempotency-Key`` so a receiver can drop the repeat.

A refused case (the receiver answers 4xx), a template that renders no JSON, or the last
of ``ticket.tries`` is recorded as ``failed`` with the reason (``fleetmedic status`` and
``history`` show it); the email still carries the case.

Known gap, said plainly: this is a second delivery path beside the outbox
(controller/outbox.py) that email and chat use. It keeps what the issue asks (persisted on
the Node, retried, one ticket per case, across restarts), and ``fleetmedic status`` reads
the ticket's state and issue key from the same record; moving it onto the outbox (a
``ticket`` channel in controller/channels.py, one ``once`` letter per GPU's case) needs
the outbox to report a letter's end back to the Node, which it does not yet do, so it was
not done in this change.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fleetmedic.adapters import ticket
from fleetmedic.controller.parts import Look, Part
from fleetmedic.errors import ConfigError, FleetmedicError
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.actions import Event, Stale, Update
from fleetmedic.policy.history import parse_time, short, stamp
from fleetmedic.policy.profiles import assign
from fleetmedic.policy.rmaflow import TICKET_PENDING, TICKET_SENT, RmaRecord

log = logging.getLogger(__name__)

FAILED = "failed"
Write = Callable[[Update], object]


class Ticketer(Part):
    """The loop's part (controller/parts.py) that sends the RMA tickets due at each cycle's
    look, while this controller acts (``acting``: it leads, not a dry run)."""

    name = "tickets"

    def __init__(
        self,
        cfg: Config,
        write: Write,
        submit: Callable[[Callable[[], object]], None],
        clock: Callable[[], datetime],
        acting: Callable[[], bool] = lambda: True,
        send: Callable[..., str] = ticket.send,
    ) -> None:
        self.cfg, self.write, self.submit, self.clock = cfg, write, submit, clock
        self.acting, self._send_one = acting, send
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def observe(self, look: Look) -> None:
        if self.acting():
            self.due(look.views, look.now)

    def due(self, views: Sequence[NodeView], now: datetime) -> list[str]:
        """Start the sends that are due; the nodes whose case was handed to a worker."""
        due = []
        for v in views:
            raw = v.annotations.get(keys.ANN_RMA)
            rec = RmaRecord.decode(raw) if raw else None
            if (
                rec is None
                or rec.ticket != TICKET_PENDING
                or keys.ANN_ESCALATED not in v.annotations
            ):
                continue
            retry = parse_time(rec.ticket_at) if rec.ticket_at else None
            if retry is not None and now < retry:
                continue
            with self._lock:
                if v.name in self._busy:
                    continue
                self._busy.add(v.name)
            due.append(v.name)
            self.submit(functools.partial(self._send, v, rec, raw))
        return due

    def busy(self) -> set[str]:
        with self._lock:
            return set(self._busy)

    # -- one node's cases -----------------------------------------------------------------
    def _send(self, view: NodeView, rec: RmaRecord, raw: str | None) -> None:
        try:
            self._send_cases(view, rec, raw)
        except Stale as exc:
            log.info("%s: ticket: %s; looking again", view.name, exc)
        except Exception:  # a bug here must not kill the worker pool
            log.exception("%s: ticket hand-off failed unexpectedly", view.name)
        finally:
            with self._lock:
                self._busy.discard(view.name)

    def _send_cases(self, view: NodeView, rec: RmaRecord, raw: str | None) -> None:
        profile = assign([view], self.cfg).profile_of.get(view.name, "default")
        target = self.cfg.profile(profile).ticket
        if target is None:
            self._record(view, raw, rec.with_(ticket="off"), "no ticket target in the config")
            return
        done = [s for s in rec.ticket_id.split(",") if s] if rec.ticket_id else []
        for case in cases_of(rec, view):
            gpu = str((case.get("gpu") or {}).get("serial") or case.get("case_id"))
            if any(d.startswith(f"{gpu}=") for d in done):
                continue
            try:
                issue = self._send_one(target, case)
            except (ticket.Refused, ConfigError) as exc:
                log.error(
                    "%s: RMA ticket for GPU %s not accepted (not retried): %s", view.name, gpu, exc
                )
                new = rec.with_(
                    ticket=FAILED, ticket_error=short(str(exc)), ticket_tries=rec.ticket_tries + 1
                )
                self._record(view, raw, new, f"ticket refused: {exc}", warn=True)
                return
            except FleetmedicError as exc:
                tries = rec.ticket_tries + 1
                if tries >= target.tries:
                    new = rec.with_(ticket=FAILED, ticket_error=short(str(exc)), ticket_tries=tries)
                    log.error("%s: RMA ticket given up after %d tries: %s", view.name, tries, exc)
                    self._record(
                        view, raw, new, f"ticket given up after {tries} tries: {exc}", warn=True
                    )
                    return
                later = stamp(self.clock() + timedelta(seconds=target.retry_interval))
                log.warning(
                    "%s: RMA ticket not sent (try %d of %d, next at %s): %s",
                    view.name, tries, target.tries, later, exc,
                )  # fmt: skip
                new = rec.with_(
                    ticket_tries=tries,
                    ticket_error=short(str(exc)),
                    ticket_at=later,
                    ticket_id=",".join(done),
                )
                self._record(view, raw, new)
                return
            done.append(f"{gpu}={issue}")
            log.info("%s: RMA ticket sent for GPU %s (%s)", view.name, gpu, issue or "accepted")
        new = rec.with_(
            ticket=TICKET_SENT,
            ticket_at=stamp(self.clock()),
            ticket_error="",
            ticket_tries=rec.ticket_tries + 1,
            ticket_id=",".join(done),
        )
        self._record(view, raw, new, f"RMA ticket sent to {target.name}: {', '.join(done)}")

    def _record(
        self, view: NodeView, raw: str | None, rec: RmaRecord, said: str = "", warn: bool = False
    ) -> None:
        events = (Event("RMATicket", short(said), "Warning" if warn else "Normal"),) if said else ()
        self.write(
            Update(
                node=view.name,
                at=stamp(self.clock()),
                annotations={keys.ANN_RMA: rec.encode()},
                expect_annotations={keys.ANN_RMA: raw},
                events=events,
            )
        )


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
