"""Call the API server until it answers, logging one line per outage.

The agent never crashes because the API server is down or refuses it: both of
its threads wrap every call in :meth:`Retrier.call`, which waits with capped,
jittered exponential backoff and returns only with a result (or raises
:class:`Stopped` once the agent is shutting down). A pending write (a fencing
action, a round's strikes) is held, not dropped, while it waits.

Logging is shared by the threads: the first failure of an outage logs one
warning, recovery logs one info line with the outage's length. A refusal
(403/404/422: RBAC, admission policy, wrong node name) logs each distinct
message once.
"""

from __future__ import annotations

import logging
import random
import subprocess
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from fleetmedic.errors import FleetmedicError, PermanentError, TemporaryError

log = logging.getLogger("fleetmedic.agent")
T = TypeVar("T")

HEALTHY_RUN = 60.0
"""Seconds a log follower must have run for its retry wait to start over at 1 s."""


class Stopped(Exception):
    """The agent is shutting down (or, with ``give_up_after``, gave up); the call was abandoned."""


class Retrier:
    def __init__(
        self,
        stop: threading.Event,
        *,
        base: float = 0.5,
        cap: float = 30.0,
        give_up_after: float | None = None,
        on_attempt: Callable[[], None] | None = None,
    ) -> None:
        self.stop = stop
        self.on_attempt = on_attempt  # e.g. the liveness heartbeat: waiting is not hanging
        self.base = base
        self.cap = cap
        self.give_up_after = give_up_after  # None: never (the daemon); --once gives up
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._last_refusal = ""

    def call(self, what: str, fn: Callable[[], T]) -> T:
        delay = self.base
        deadline = None if self.give_up_after is None else time.monotonic() + self.give_up_after
        while not self.stop.is_set():
            if self.on_attempt is not None:
                self.on_attempt()
            try:
                result = fn()
            except TemporaryError as exc:
                self._down(what, exc)
                wait = min(self.cap, max(delay, exc.delay))
            except PermanentError as exc:
                self._refused(what, exc)
                wait = self.cap
            else:
                self._up()
                return result
            delay = min(self.cap, delay * 2)
            if deadline is not None:
                if time.monotonic() >= deadline:
                    break
                wait = min(wait, deadline - time.monotonic())
            self.stop.wait(wait * random.uniform(0.8, 1.2))
        raise Stopped(what)

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def _down(self, what: str, exc: Exception) -> None:
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        log.warning(
            "API server unavailable (%s); strikes stay on the Node, retrying up to every %gs",
            exc,
            self.cap,
        )

    def _refused(self, what: str, exc: Exception) -> None:
        message = str(exc) if str(exc).startswith(what) else f"{what}: {exc}"
        with self._lock:
            if message == self._last_refusal:
                return
            self._last_refusal = message
        log.error("API server refused: %s; retrying every %gs", message, self.cap)

    def _up(self) -> None:
        with self._lock:
            since, self._down_since = self._down_since, None
            self._last_refusal = ""
        if since is not None:
            log.info("API server reachable again after %.0fs", time.monotonic() - since)


def follow_log(
    follow: Callable[[], None],
    stop: threading.Event,
    once: bool,
    what: str,
    *,
    rest_after_end: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run ``follow`` (a log watch's read loop) until ``stop`` is set, or once with
    ``once``. A failure to read is one line naming ``what``, then a wait of 1 s, doubled
    after each failure up to 30 s; a follower that had run for :data:`HEALTHY_RUN` starts
    over at 1 s (an outage a week ago does not slow today's restart). ``rest_after_end``:
    a follower that ended on its own (journalctl exited) is started again after the
    current wait, not at once."""
    delay = 1.0
    while not stop.is_set():
        began = clock()
        failure: str | None = None
        try:
            follow()
        except Stopped:
            return
        except (FleetmedicError, OSError, subprocess.SubprocessError) as exc:
            failure = " ".join(str(exc).split())
        if clock() - began >= HEALTHY_RUN:
            delay = 1.0
        if failure is not None:
            log.error("%s: %s; retrying in %.0fs", what, failure, delay)
        if once:
            return
        if failure is not None or rest_after_end:
            stop.wait(delay)
        if failure is not None:
            delay = min(delay * 2, 30.0)
