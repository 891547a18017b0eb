"""Best-effort writes that follow a recorded change: the change's Events and the Node's
condition. They mirror what the taints and annotations already say (a failed one is only
logged), so the step that made the change need not wait for them: at 5,000 Nodes the two
requests were a third of the time from a taint to its playbook's start.

One thread posts them in the order they came, so a Node's Events and its condition end as
the last write left them. ``close`` waits a bounded time for what is queued (a stopping
controller still posts the Events of its last writes).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from fleetmedic import logcontext
from fleetmedic.controller.parts import Part

log = logging.getLogger(__name__)


class Paperwork(Part):
    name = "paperwork"

    def __init__(self, cluster: str | None = None) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=1,  # in order
            thread_name_prefix="fleetmedic-paperwork",
            initializer=logcontext.adopt,
            initargs=(cluster,),
        )
        self._lock = threading.Lock()
        self._last: Future | None = None

    def post(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` after everything posted before it; errors are logged, never raised.
        After :meth:`close`, ``fn`` runs on the caller's thread (nothing is lost)."""
        try:
            future = self._pool.submit(_logged, fn)
        except RuntimeError:  # closed
            _logged(fn)
            return
        with self._lock:
            self._last = future

    def shutdown(self, grace: float) -> None:
        self.close(grace)

    def close(self, grace: float) -> None:
        """Stop taking work; wait up to ``grace`` seconds for what is queued."""
        self._pool.shutdown(wait=False)
        with self._lock:
            last = self._last
        if last is not None and not wait([last], timeout=grace).done:
            log.warning("stopping before every Event and condition was posted")


def _logged(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:  # best effort; one failure must not stop the ones after it
        log.exception("posting an Event or condition failed")
