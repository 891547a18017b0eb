"""The worker threads and what the loop must know about them.

- ``busy``: nodes a worker of this process is working on (not decided again until done);
- back-off: nodes left alone for a while after an error or a held node Lease;
- cancellation: every running job watches one Event; ``cancel_running`` sets it (lost
  leadership, shutdown) and hands new jobs a fresh one.

A job is ``job(view, action, cancel) -> float | None``: the seconds to leave the node
alone afterwards, or None. An action is the ladder's :class:`Action` or anything else that
names its ``node`` (the sweeper's jobs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, Protocol, TypeVar

from fleetmedic import logcontext
from fleetmedic.controller.parts import Part
from fleetmedic.model.nodestate import NodeView

log = logging.getLogger(__name__)


class OnNode(Protocol):
    @property
    def node(self) -> str: ...


A = TypeVar("A", bound=OnNode)


class Workers(Part, Generic[A]):
    """A pool of jobs on nodes; as a part of the loop (controller/parts.py), the ladder's."""

    name = "ladder"

    def __init__(
        self,
        job: Callable[[NodeView, A, threading.Event], float | None],
        size: int,
        on_done: Callable[[], None],
        cluster: str | None = None,
        name: str = "fleetmedic-work",
    ) -> None:
        self.job, self.on_done = job, on_done
        self.pool = ThreadPoolExecutor(
            max_workers=size,
            thread_name_prefix=name,
            initializer=logcontext.adopt,  # its jobs log under their cluster
            initargs=(cluster,),
        )
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._busy: dict[str, A] = {}
        self._futures: dict[str, Future] = {}
        self._backoff: dict[str, float] = {}  # node -> monotonic time to leave it alone until
        self.finished = 0  # jobs ended (for --once: did work end while a cycle looked?)

    def busy(self) -> dict[str, A]:
        with self._lock:
            return dict(self._busy)

    def backed_off(self) -> dict[str, float]:
        """Nodes to leave alone now -> monotonic time until when (expired ones dropped)."""
        now = time.monotonic()
        with self._lock:
            self._backoff = {n: t for n, t in self._backoff.items() if t > now}
            return dict(self._backoff)

    def back_off(self, node: str, seconds: float) -> None:
        with self._lock:
            self._backoff[node] = time.monotonic() + seconds

    def submit(self, view: NodeView, action: A) -> None:
        with self._lock:
            self._busy[action.node] = action
            cancel = self._cancel
        try:
            future = self.pool.submit(self._run, view, action, cancel)
        except RuntimeError:  # shutting down
            with self._lock:
                self._busy.pop(action.node, None)
            return
        with self._lock:
            self._futures[action.node] = future

    def side_job(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the pool (emails, pruning) without marking a node busy."""
        try:
            self.pool.submit(fn)
        except RuntimeError:  # shutting down
            pass

    def _run(self, view: NodeView, action: A, cancel: threading.Event) -> None:
        try:
            leave_alone = self.job(view, action, cancel)
            if leave_alone:
                self.back_off(action.node, leave_alone)
        finally:
            with self._lock:
                self._busy.pop(action.node, None)
                self._futures.pop(action.node, None)
                self.finished += 1
            self.on_done()

    def active(self) -> bool:
        return bool(self.busy())

    def cancel(self) -> None:
        self.cancel_running()

    def cancel_running(self) -> None:
        with self._lock:
            old, self._cancel = self._cancel, threading.Event()
        old.set()

    def shutdown(self, grace: float) -> None:
        """Cancel running jobs and drop queued ones; wait up to ``grace`` seconds for the
        running ones to record what they finished."""
        self.cancel_running()
        with self._lock:
            self._cancel.set()  # jobs that start from now on stop at once
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for name, future in list(self._futures.items()):
                if future.cancelled():  # queued, never started
                    self._busy.pop(name, None)
        deadline = time.monotonic() + grace
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.busy():
            log.warning(
                "stopping with work under way on %s; the next start resumes it",
                ", ".join(sorted(self.busy())),
            )
