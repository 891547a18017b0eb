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
posting an id that is pending is a no-op, and a ``once`` letter's end is remembered for
:data:`KEEP_ENDED` (a small tombstone on the record: delivered, with what the receiver
said, or given up, with why), so it is never sent twice nor tried again, across restarts
too: what one ticket per case needs (:meth:`Outbox.ended`). A sender that keeps its own
record of a letter's end (the RMA ticket's, on the Node: controller/ticketer.py) hears of
each end through :meth:`Outbox.listen`, and after a restart reads it from the tombstone.

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
KEEP_ENDED = timedelta(days=7)
"""How long a ``once`` letter's end is remembered (a tombstone of 100-400 bytes)."""
NOTE_LIMIT = 256
"""Characters of a channel's note (an issue key, a refusal) kept in a tombstone."""


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a ``once`` letter ended: ``sent`` (``note``: what the channel said, e.g. the
    receiver's issue key) or given up (``note``: why), and when."""

    sent: bool
    note: str
    at: str

    def tombstone(self, letter_id: str) -> str:
        return json.dumps(
            {"id": letter_id, "sent" if self.sent else "gave_up": self.at, "note": self.note}
        )


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
        self._ended: dict[str, Ended] = {}  # once-letters' ends, by id
        self._outages: dict[tuple[str, str], Backoff] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._said_memory = False
        self._listeners: list[Callable[[Letter, bool, str], None]] = []

    name = "outbox"

    # -- the part's lifecycle ------------------------------------------------------------
    def start(self, stop: threading.Event | None = None) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = logcontext.thread(self._run, name="fleetmedic-outbox")
                self._thread.start()

    def restore(self) -> None:
        """Take the record's letters (a restart, a new leader): those still to deliver, and
        the ends of once-letters. Old tombstones are pruned."""
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
                    letter_id, end = tomb
                    at = parse_time(end.at)
                    if at is None or now - at > KEEP_ENDED:
                        stale[key] = None
                    else:
                        self._ended[letter_id] = end
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
        fail what it reports). An id pending, or a once-letter that ended, is not queued
        again."""
        with self._cond:
            if letter.id in self._pending or letter.id in self._ended:
                return
            self._pending[letter.id] = _Pending(letter, due=self.clock())
            self._cond.notify()
        self.start()

    def pending(self) -> list[Letter]:
        with self._cond:
            return [p.letter for p in self._pending.values()]

    def ended(self, letter_id: str) -> Ended | None:
        """How the once-letter ``letter_id`` ended (within :data:`KEEP_ENDED`, across
        restarts: its tombstone); None while it is pending or was never posted."""
        with self._cond:
            return self._ended.get(letter_id)

    def listen(self, fn: Callable[[Letter, bool, str], None]) -> None:
        """``fn(letter, sent, note)`` at each letter's end, on the outbox's thread: sent
        (``note``: what the channel said) or given up (``note``: why)."""
        self._listeners.append(fn)

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
            self._done(p, sent=False, note=f"no channel {letter.channel!r}")
            return
        p.tries += 1
        key = (letter.channel, letter.target)
        interval, tries = 60.0, 1
        try:
            interval, tries = channel.schedule(self.cfg, letter)
            note = channel.send(self.cfg, letter)
        except ConfigError as exc:
            log.error("%s to %s not sent (not retried): %s", letter.what, letter.target, exc)
            self._done(p, sent=False, note=one_line(exc))
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
        self._done(p, sent=True, note=note)

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
            self._done(p, sent=False, note=f"given up after {p.tries} tries: {why}")
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

    def _done(self, p: _Pending, sent: bool, note: str = "") -> None:
        letter = p.letter
        # the listeners hear of the end while the letter is still pending, so a sender
        # that posts again until it hears (controller/ticketer.py) never posts it anew
        for listener in self._listeners:
            try:
                listener(letter, sent, note)
            except Exception:  # a listener's bug must not stop the sender
                log.exception("outbox: a listener failed on the end of %s", letter.what)
        end = Ended(sent, note[:NOTE_LIMIT], stamp(datetime.now(UTC)))
        with self._cond:
            self._pending.pop(letter.id, None)
            if letter.once:
                self._ended[letter.id] = end
        if letter.once:
            self._write({record_key(letter.id): end.tombstone(letter.id)})
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


def _tombstone(raw: str) -> tuple[str, Ended] | None:
    """(id, end) of an ended once-letter's entry, else None."""
    try:
        d = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(d, dict) or "id" not in d or not set(d) <= {"id", "sent", "gave_up", "note"}:
        return None
    sent = "sent" in d
    if sent == ("gave_up" in d):
        return None
    return str(d["id"]), Ended(sent, str(d.get("note", "")), str(d["sent" if sent else "gave_up"]))
