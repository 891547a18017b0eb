"""Capped exponential back-off over one outage, and which failures are news.

The controller's watches, its per-cluster loops and the commands that wait for an API
server all retry the same way: the first wait, doubled after each failure up to a cap,
back to the first once it works again. They log an outage as three kinds of news only
(it started, its cause changed, it is over), never one line per retry: an on-call
engineer reading an hour-long outage needs three lines, not 1,800. Each caller words its
own lines; this keeps the arithmetic and the memory of the outage in one place.

(The agent's :class:`fleetmedic.agent.retry.Retrier` keeps its own: two threads share its
outage while each call backs off on its own, with jitter.)
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Backoff:
    """``failed(cause)`` -> (seconds to wait, is it news); ``over()`` -> the outage's length
    in seconds if one was under way, else None. ``first_for``: a cause's own first wait
    (a refusal that retrying fast will not heal starts higher)."""

    def __init__(
        self,
        first: float,
        cap: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first, self.cap, self.clock = first, cap, clock
        self.delay, self.cause = first, ""
        self.since: float | None = None

    def failed(self, cause: str, first: float | None = None) -> tuple[float, bool]:
        floor = self.first if first is None else first
        if self.since is None:
            self.since, self.delay = self.clock(), floor
        news = cause != self.cause
        self.cause = cause
        wait, self.delay = self.delay, min(self.cap, max(floor, self.delay * 2))
        return min(wait, self.cap), news

    def over(self) -> float | None:
        since = self.since
        self.delay, self.since, self.cause = self.first, None, ""
        return None if since is None else self.clock() - since
