"""One way to deliver a notification: every email, chat message (and ticket) the
controller sends goes through an :class:`Outbox` and its channels (controller/channels.py).

- :meth:`Outbox.post`: the letter is kept on the pause ConfigMap (data key
  ``outbox.<hash of its id>``, the breaker's ConfigMap: no new object, no new RBAC), tried
  on the outbox's own thread (never the loop's or a worker's), retried, and taken off the
  record once it is delivered or given up. A restarted or new leader reads the record
  (:meth:`Outbox.restore`) and sends what the last one could not. Only an acting
  controller delivers (``acting``): a follower keeps its letters until it leads again.
- :func:`deliver_now`: one try on the caller's thread through the same channels, for
  senders that keep their own record of the message: the ladder's escalation email (its
  tries and next try are on the Node, policy/inflight.py's ``Escalated``, which the
  ladder retries) and the commands typed by hand (``fleetmedic release``).

Retries: a letter is tried every ``interval`` seconds up to ``tries`` times, both from
its channel (``smtp.retry_interval`` and 10 for email, ``notify.retry_interval`` and
``notify.tries`` for chat). A target's outage is a :class:`~fleetmedic.backoff.Backoff`,
so the log says it started, its cause changed and it is over, once each, not one warning
per letter per try. A :class:`~fleetmedic.errors.ConfigError` (an unreadable secret, an
URL the library does not know) is never retried.

A letter's ``id`` says what it is about (``chat/pager/escalation/gpu-7/2026-...``):
posting an id that is pending is a no-op, and a ``once`` letter's id is remembered for
:data:`KEEP_SENT` after delivery (a small tombstone on the record), so it is never sent
twice, across restarts too: what one ticket per case needs.

Known gaps, plainly: delivery is at least once: a controller killed between a send and
its record sends that letter again after the restart (a receiver that must not see it
twice dedupes on the letter's id, which a channel can send along). A letter whose JSON
is over :data:`PERSIST_LIMIT` (a domain page with many nodes' check results), or any
letter when the pause ConfigMap is off (``safety.pause_configmap: ""``) or missing, is
kept in memory only, and a restart drops it (logged once).

Adding a target kind (a ticket webhook, say) is one small adapter plus config:

1. ``adapters/<kind>.py``: ``send(target, payload, timeout)``, one try: TemporaryError
   when it is worth trying again, ConfigError when not; never a secret in a message;
2. its config: a target section (name, where its URL or secret is, retry settings) in
   model/config/notify.py;
3. one :class:`Channel` in controller/channels.py's ``CHANNELS``: which target config
   the letter's ``target`` names, and how often to try;
4. ``outbox.post(Letter(channel="<kind>", ...))`` where the message arises
   (``once=True`` when it must never be sent twice).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from fleetmedic import logcontext
from fleetmedic.adapters.cluster import Store
from fleetmedic.backoff import Backoff
from fleetmedic.controller.parts import Part
from fleetmedic.errors import ConfigError, FleetmedicError, one_line
from fleetmedic.model.config import Config
from fleetmedic.policy.history import parse_time, stamp

log = logging.getLogger(__name__)

RECORD_PREFIX = "outbox."
"""Data keys of the pause ConfigMap that hold letters (one key each: no read-modify-write,
so posting never conflicts with the breaker's or the domains' writes)."""
PERSIST_LIMIT = 64 * 1024
"""Bytes of one letter's JSON kept on the record; a ConfigMap holds 1 MiB in all."""
KEEP_SENT = timedelta(days=7)
"""How long a delivered ``once`` letter's id is remembered (a tombstone of ~100 bytes)."""


@dataclasses.dataclass(frozen=True)
class Letter:
    """One message to one target. ``payload`` is JSON: what the channel renders."""

    id: str
    channel: str  # email | chat | ... (controller/channels.py)
    target: str  # the target's name in the config, never its URL (the secret)
    what: str  # for the log: "storm email", "escalation notification"
    payload: Mapping[str, Any]
    profile: str = "default"  # whose config names the target
    once: bool = False  # never sent twice (a tombstone after delivery)

    def encode(self, tries: int = 0) -> str:
        return json.dumps(
            {**dataclasses.asdict(self), "tries": tries}, separators=(",", ":"), default=str
        )

    @classmethod
    def decode(cls, raw: str) -> tuple[Letter, int] | None:
        """(letter, tries made) of a record entry; None for a tombstone or garbage."""
        try:
            d = json.loads(raw)
            tries = int(d.pop("tries", 0))
            return cls(**d), tries
        except (ValueError, TypeError):
            return None


def record_key(letter_id: str) -> str:
    return RECORD_PREFIX + hashlib.sha256(letter_id.encode()).hexdigest()[:24]


@dataclasses.dataclass(frozen=True)
class Channel:
    """How letters of one kind reach their target. ``send(cfg, letter)``: one try; returns
    a note for the log ("" for none); raises TemporaryError (try again) or ConfigError
    (never). ``schedule(cfg, letter)``: (seconds between tries, tries)."""

    send: Callable[[Config, Letter], str]
    schedule: Callable[[Config, Letter], tuple[float, int]]


@dataclasses.dataclass
class _Pending:
    letter: Letter
    tries: int = 0
    due: float = 0.0  # monotonic
    saved: bool = False  # on the record
    memory_only: bool = False  # too big for the record, or no record to keep it on


def deliver_now(cfg: Config, letter: Letter, channels: Mapping[str, Channel]) -> str:
    """One try on the caller's thread (see the module doc); FleetmedicError if it failed."""
    channel = channels.get(letter.channel)
    if channel is None:
        raise ConfigError(f"{letter.what}: no channel {letter.channel!r}")
    return channel.send(cfg, letter)


class Outbox(Part):
    """The retrying, persisted queue of letters (see the module doc); a part of the loop
    (controller/parts.py).

    ``store`` and ``ref``: where the record lives (the pause ConfigMap); None keeps letters
    in memory only. ``stop``: the controller's stop event (read late: ``run`` replaces
    it). The sender thread starts with :meth:`start`, or with the first letter posted."""

    def __init__(
        self,
        cfg: Config,
        channels: Mapping[str, Channel],
        *,
        stop: Callable[[], threading.Event],
        store: Store | None = None,
        ref: tuple[str, str] | None = None,
        acting: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg, self.channels, self.stop, self.acting = cfg, channels, stop, acting
        self.store, self.ref, self.clock = store, ref if store is not None else None, clock
        self._pending: dict[str, _Pending] = {}
        self._sent: dict[str, str] = {}  # once-letters delivered: id -> when
        self._outages: dict[tuple[str, str], Backoff] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._said_memory = False

    name = "outbox"

    # -- the part's lifecycle ------------------------------------------------------------
    def start(self, stop: threading.Event | None = None) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = logcontext.thread(self._run, name="fleetmedic-outbox")
                self._thread.start()

    def restore(self) -> None:
        """Take the record's letters (a restart, a new leader): those still to deliver, and
        the ids of delivered once-letters. Old tombstones are pruned."""
        if self.ref is None or self.store is None:
            return
        try:
            cm = self.store.get_config_map(*self.ref)
        except FleetmedicError as exc:
            log.warning("cannot read the outbox's record (%s); letters left there wait", exc)
            return
        data = (cm or {}).get("data") or {}
        stale: dict[str, str | None] = {}
        now = datetime.now(UTC)
        with self._cond:
            for key, raw in data.items():
                if not key.startswith(RECORD_PREFIX):
                    continue
                tomb = _tombstone(raw)
                if tomb is not None:
                    sent_at = parse_time(tomb[1])
                    if sent_at is None or now - sent_at > KEEP_SENT:
                        stale[key] = None
                    else:
                        self._sent[tomb[0]] = tomb[1]
                    continue
                got = Letter.decode(raw)
                if got is None:
                    log.warning("outbox: unreadable entry %s on the record, dropped", key)
                    stale[key] = None
                    continue
                letter, tries = got
                if letter.id not in self._pending:
                    self._pending[letter.id] = _Pending(letter, tries, self.clock(), saved=True)
                    log.info("outbox: %s to %s taken from the record", letter.what, letter.target)
            self._cond.notify()
        if stale:
            self._write(stale)

    # -- posting ------------------------------------------------------------------------
    def post(self, letter: Letter) -> None:
        """Queue ``letter`` (never blocks, never raises: a notification's trouble must not
        fail what it reports). An id pending or already sent once is not queued again."""
        with self._cond:
            if letter.id in self._pending or letter.id in self._sent:
                return
            self._pending[letter.id] = _Pending(letter, due=self.clock())
            self._cond.notify()
        self.start()

    def pending(self) -> list[Letter]:
        with self._cond:
            return [p.letter for p in self._pending.values()]

    # -- the sender ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self.stop().is_set():
            with self._cond:
                self._cond.wait(self._wait())
            if self.stop().is_set():
                return
            self._keep_new()
            if not self.acting():
                continue
            for p in self._due():
                if self.stop().is_set():
                    return
                self._attempt(p)

    def _wait(self) -> float:
        if any(not p.saved and not p.memory_only for p in self._pending.values()):
            return 0.0
        dues = [p.due for p in self._pending.values()]
        return min(max(min(dues) - self.clock(), 0.05), 1.0) if dues else 1.0

    def _due(self) -> list[_Pending]:
        now = self.clock()
        with self._cond:
            return [p for p in self._pending.values() if p.due <= now]

    def _keep_new(self) -> None:
        """Put letters not yet on the record there (before their first try: a kill right
        after posting loses nothing)."""
        with self._cond:
            new = [p for p in self._pending.values() if not p.saved and not p.memory_only]
        for p in new:
            raw = p.letter.encode(p.tries)
            if self.ref is None or len(raw) > PERSIST_LIMIT:
                p.memory_only = True
                if self.ref is not None:
                    log.warning(
                        "outbox: %s to %s is %d bytes, kept in memory only (a restart "
                        "before it is delivered drops it)",
                        p.letter.what,
                        p.letter.target,
                        len(raw),
                    )
                continue
            if self._write({record_key(p.letter.id): raw}):
                p.saved = True
            else:
                p.memory_only = True

    def _attempt(self, p: _Pending) -> None:
        letter = p.letter
        channel = self.channels.get(letter.channel)
        if channel is None:
            log.error("%s to %s dropped: no channel %r", letter.what, letter.target, letter.channel)
            self._done(p, sent=False)
            return
        p.tries += 1
        key = (letter.channel, letter.target)
        interval, tries = 60.0, 1
        try:
            interval, tries = channel.schedule(self.cfg, letter)
            note = channel.send(self.cfg, letter)
        except ConfigError as exc:
            log.error("%s to %s not sent (not retried): %s", letter.what, letter.target, exc)
            self._done(p, sent=False)
            return
        except Exception as exc:  # FleetmedicError, or a channel's bug: tried again
            why = one_line(exc) if isinstance(exc, FleetmedicError) else repr(exc)[:300]
            self._failed(p, key, why, interval, tries)
            return
        outage = self._outages.get(key)
        lasted = outage.over() if outage is not None else None
        if lasted is not None:
            log.warning("%s %s answers again after %.0fs", letter.channel, letter.target, lasted)
        log.info("%s sent to %s%s", letter.what, letter.target, f": {note}" if note else "")
        self._done(p, sent=True)

    def _failed(
        self, p: _Pending, key: tuple[str, str], why: str, interval: float, tries: int
    ) -> None:
        letter = p.letter
        outage = self._outages.setdefault(key, Backoff(interval, interval, clock=self.clock))
        wait, news = outage.failed(why)
        if p.tries >= tries:
            log.error(
                "%s to %s dropped after %d tries: %s", letter.what, letter.target, p.tries, why
            )
            self._done(p, sent=False)
            return
        log.log(
            logging.WARNING if news else logging.INFO,
            "%s to %s not sent (try %d of %d, next in %gs): %s",
            letter.what,
            letter.target,
            p.tries,
            tries,
            wait,
            why,
        )
        p.due = self.clock() + wait
        if p.saved:
            self._write({record_key(letter.id): letter.encode(p.tries)})

    def _done(self, p: _Pending, sent: bool) -> None:
        letter = p.letter
        with self._cond:
            self._pending.pop(letter.id, None)
            if sent and letter.once:
                self._sent[letter.id] = stamp(datetime.now(UTC))
        if sent and letter.once:
            tomb = json.dumps({"id": letter.id, "sent": self._sent[letter.id]})
            self._write({record_key(letter.id): tomb})
        elif p.saved:
            self._write({record_key(letter.id): None})

    def _write(self, data: dict[str, str | None]) -> bool:
        if self.ref is None or self.store is None:
            return False
        try:
            self.store.patch_config_map_data(*self.ref, data)
            return True
        except FleetmedicError as exc:
            if not self._said_memory:
                self._said_memory = True
                log.warning(
                    "outbox: letters kept in memory only, a restart drops those not yet "
                    "delivered (%s); ship the ConfigMap of deploy/controller/configmap.yaml",
                    exc,
                )
            return False


def _tombstone(raw: str) -> tuple[str, str] | None:
    """(id, when sent) of a delivered once-letter's entry, else None."""
    try:
        d = json.loads(raw)
    except ValueError:
        return None
    if isinstance(d, dict) and set(d) == {"id", "sent"}:
        return str(d["id"]), str(d["sent"])
    return None
