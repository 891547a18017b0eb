"""The Loki source's tail mode (the default): new lines through Loki's websocket tail
(``/loki/api/v1/tail``) instead of one ``query_range`` per query every poll interval.

On start, and after anything that broke the tail (Loki restarted or killed, the
connection dropped or went silent, leadership lost and regained, Loki reporting dropped
entries), a session:

1. opens one tail per query (``start``: now) and waits until Loki follows it (its first
   frame: Loki registers the tail after the websocket handshake, and pings every
   second once it follows), so no line pushed from then on is missed;
2. catches up: one poll round, ``query_range`` from the cursor to now, so nothing
   written while the source was away is missed;
3. hands every tail batch to the same cursor (:meth:`LokiSource.take`): a line at or
   before it (one the catch-up read, or Loki's replay of ``start``) is dropped, so
   nothing is handled twice. The cursor is saved after each batch's fences, as when
   polling, so a restart resumes there.

Entries Loki reports dropped (its tail buffer overflowed: the reader fell behind) are
logged as a warning with their count, and the session ends: the next one's catch-up
reads them back from Loki, as they lie past the cursor.

Where the tail is refused (an HTTP answer to the websocket handshake, e.g. a proxy that
does not pass websockets; Loki closing it at once, e.g. ``max_concurrent_tail_requests``)
three times in a row, one warning line says so and the source polls for ``tail_retry``
seconds, then tries the tail again. Loki down altogether is the poll mode's one line
each way with back-off.

What the tail costs: Loki's querier hands a tail its lines after an idle sleep of
500 ms (``tailerWaitEntryThrottle``, not configurable in Loki 3.x), so a line reaches
the source 0 to 500 ms after Loki ingested it, as a poll every 0.5 s would, but with
no query against Loki while nothing happens (``bench/loki_to_taint.py`` measures both).

Lines arrive in the order Loki ingests them, not in timestamp order across streams (a
shipper's batch can come after another node's newer line): the cursor's settle window
(:class:`~fleetmedic.agent.lokisource.Cursor`) reads such a line when it is at most
30 s older than the newest handled. Known gap (shared with the poll mode): a line that
late is not read.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from fleetmedic.adapters.loki import MAX_BACKOFF, Entry, Tail, TailBatch, TailRefused
from fleetmedic.errors import FleetmedicError

log = logging.getLogger("fleetmedic.loki")

REFUSALS = 3  # tails refused in a row before falling back to polling
TICK = 1.0  # how often the session looks at stop and leadership while idle
BACKOFF = 1.0  # Loki away: 2 s, doubling to MAX_BACKOFF (as the poll mode's back-off)
BRIEF = 10.0  # a session shorter than this waits BACKOFF before the next one


class Followed(Protocol):
    """What the tail needs of the Loki source (agent/lokisource.py's LokiSource, which
    imports this module, never the other way round)."""

    cfg: Any  # LokiSourceConfig: poll_interval, tail_retry, batch
    client: Any  # adapters/loki.py's LokiClient: tail()
    metrics: Any  # LokiMetrics: lines, last_poll
    _cursor_loaded: bool

    @property
    def queries(self) -> Sequence[str]: ...

    def clock(self) -> float: ...

    def poll(self) -> int: ...

    def take(self, query: str, entries: Sequence[Entry]) -> int: ...

    def failed(self, exc: FleetmedicError) -> None: ...

    def run_polling(
        self,
        stop: threading.Event,
        active: Callable[[], bool] = ...,
        until: Callable[[], bool] = ...,
    ) -> None: ...


class Follower:
    """``run(stop, active)``: tail sessions, with the poll as the fallback."""

    def __init__(self, source: Followed) -> None:
        self.source = source
        self.cfg = source.cfg
        self.refused = 0
        self.sessions = 0  # tail sessions opened (for tests and the log)

    def run(self, stop: threading.Event, active: Callable[[], bool]) -> None:
        delay = BACKOFF
        while not stop.is_set():
            if not active():
                self.source._cursor_loaded = False
                stop.wait(self.cfg.poll_interval)
                continue
            began = time.monotonic()
            try:
                self.session(stop, active)
                delay = BACKOFF
                if time.monotonic() - began < BRIEF:
                    stop.wait(BACKOFF)  # a tail that keeps breaking at once: no busy loop
            except TailRefused as exc:
                self.refused += 1
                if self.refused < REFUSALS:
                    self._poll_once()  # read meanwhile: a refusal delays no line
                    stop.wait(BACKOFF * self.refused)
                    continue
                self.refused = 0
                log.warning(
                    "loki tail refused %d times (%s): polling every %gs, the tail again in %gs",
                    REFUSALS,
                    exc,
                    self.cfg.poll_interval,
                    self.cfg.tail_retry,
                )
                self._fallback(stop, active)
            except FleetmedicError as exc:  # Loki down, the cursor's home: never a crash
                self.source.failed(exc)
                delay = min(MAX_BACKOFF, max(delay * 2, getattr(exc, "delay", 0.0)))
                stop.wait(delay)

    def _fallback(self, stop: threading.Event, active: Callable[[], bool]) -> None:
        until = time.monotonic() + self.cfg.tail_retry
        self.source.run_polling(stop, active, lambda: time.monotonic() >= until)

    def _poll_once(self) -> None:
        try:
            self.source.poll()
        except FleetmedicError as exc:
            self.source.failed(exc)

    def session(self, stop: threading.Event, active: Callable[[], bool]) -> None:
        """Open the tails, catch up, follow until something breaks (raised) or until
        ``stop`` or leadership ends (returns)."""
        source = self.source
        start_ns = int(source.clock() * 1e9)
        tails: list[Tail] = []
        readers = Readers()
        try:
            tails.extend(self._open(start_ns))
            opened = time.monotonic()
            self.sessions += 1
            source.poll()  # catch up from the cursor (after the tails follow: no gap)
            for query, tail in zip(source.queries, tails, strict=True):
                readers.start(query, tail)
            log.info("tailing %d LogQL queries (session %d)", len(tails), self.sessions)
            while not stop.is_set():
                if not active():
                    source._cursor_loaded = False
                    return
                try:
                    query, got = readers.out.get(timeout=TICK)
                except queue.Empty:
                    source.metrics.last_poll.set(source.clock())  # every tail alive and read
                    if time.monotonic() - opened >= BRIEF:
                        self.refused = 0  # (refusals count only in a row)
                    continue
                if isinstance(got, FleetmedicError):
                    # (Loki ends a tail after tail_max_duration, 1 h, too): a new session
                    # catches up; only if Loki is away does it say so, as an error
                    log.info("%s; catching up and tailing again", got)
                    return
                self.refused = 0
                if got.dropped:
                    log.warning(
                        "loki tail dropped %d entries of %s (the source fell behind): "
                        "reading them back with query_range",
                        got.dropped,
                        query,
                    )
                    return  # (the next session's catch-up reads them: past the cursor)
                self._take(query, got)
        finally:
            readers.stop()
            for tail in tails:
                tail.close()

    def _open(self, start_ns: int) -> list[Tail]:
        """Every query's tail, opened at once (each waits for Loki's first frame, up to a
        second); if one fails, the others are closed and its error raised."""
        source = self.source
        with ThreadPoolExecutor(len(source.queries), thread_name_prefix="loki-open") as pool:
            futures = [
                pool.submit(source.client.tail, q, start_ns, limit=self.cfg.batch)
                for q in source.queries
            ]
        tails, error = [], None
        for f in futures:
            try:
                tails.append(f.result())
            except FleetmedicError as exc:
                error = error or exc
        if error is not None:
            for tail in tails:
                tail.close()
            raise error
        return tails

    def _take(self, query: str, got: TailBatch) -> None:
        source = self.source
        handled = source.take(query, got.entries)
        source.metrics.lines.inc(handled)
        source.metrics.last_poll.set(source.clock())


class Readers:
    """One thread per tail, reading it into ``out`` as ``(query, TailBatch)`` or
    ``(query, error)``: the source's own thread handles every line, in one place."""

    def __init__(self) -> None:
        self.out: queue.Queue[tuple[str, TailBatch | FleetmedicError]] = queue.Queue()
        self.done = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, query: str, tail: Tail) -> None:
        t = threading.Thread(target=self._read, args=(query, tail), name="loki-tail", daemon=True)
        self.threads.append(t)
        t.start()

    def _read(self, query: str, tail: Tail) -> None:
        while not self.done.is_set():
            try:
                got = tail.recv(TICK)
            except FleetmedicError as exc:
                if not self.done.is_set():
                    self.out.put((query, exc))
                return
            if got is not None:
                self.out.put((query, got))

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join(timeout=2 * TICK)
