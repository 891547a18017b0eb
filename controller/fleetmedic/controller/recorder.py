"""Writing a decision's :class:`~fleetmedic.policy.actions.Update` to its Node.

One read-modify-write guarded by resourceVersion (``Cluster.update_node``); then the
informer's cache gets the Node as written (so the next cycle decides from it, not from
an older copy) and the step metrics are counted; the update's Events and the Node's
condition follow on the paperwork thread (``later``), off the step's critical path.

:func:`write_by_hand` is the same write for the changes a human makes from the command
line (release, quarantine, reset), with the audit line that the controller's executor
writes for its own actions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller import audit, conditions
from fleetmedic.controller.metrics import Metrics
from fleetmedic.errors import TemporaryError
from fleetmedic.model.nodestate import ForeignSignal, NodeView
from fleetmedic.model.nodestate import view as view_of
from fleetmedic.model.vocabulary import Vocabulary
from fleetmedic.policy import budget
from fleetmedic.policy.actions import Stale, Update
from fleetmedic.policy.history import parse_time

log = logging.getLogger(__name__)


class Recorder:
    def __init__(
        self,
        cluster: Cluster,
        vocab: Vocabulary,
        keep: Callable[[dict], NodeView],
        metrics: Metrics,
        stopping: Callable[[], threading.Event],
        on_written: Callable[[Update, NodeView], None] = lambda upd, view: None,
        later: Callable[[Callable[[], object]], object] = lambda fn: fn(),
    ) -> None:
        """``keep``: puts the written Node into the informer's cache, returns its view;
        ``on_written``: told of each change written (the chat notifications);
        ``later``: runs the best-effort writes that follow (Events, the condition),
        in order (:class:`~fleetmedic.controller.paperwork.Paperwork`)."""
        self.cluster, self.vocab, self.keep, self.metrics = cluster, vocab, keep, metrics
        self.stopping, self.on_written, self.later = stopping, on_written, later

    def write(self, upd: Update, retry_for: float = 0.0) -> NodeView:
        """Apply ``upd`` (RV-guarded) and return the Node's view as written. Stale
        propagates; other TemporaryErrors are retried for ``retry_for`` seconds."""
        deadline = time.monotonic() + retry_for
        while True:
            try:
                return self._write_once(upd)
            except Stale:
                raise
            except TemporaryError as exc:
                if time.monotonic() >= deadline or self.stopping().is_set():
                    raise
                log.warning("%s: recording failed (%s); retrying", upd.node, exc)
                time.sleep(min(max(exc.delay, 0.5), 5.0))

    def _write_once(self, upd: Update) -> NodeView:
        changed = False
        before = None

        def mutate(node: dict) -> bool:
            nonlocal changed, before
            before = self.vocab.repair_state_of((node.get("spec") or {}).get("taints") or [])
            changed = upd.apply(node, self.vocab)
            return changed

        node = self.cluster.update_node(upd.node, mutate)
        after = self.keep(node)
        if not changed:
            return after
        if upd.state is not None and (before or "healthy") != after.state:
            log.info("%s: %s -> %s", upd.node, before or "healthy", after.state)
        for ev in upd.events:
            log.info("%s: %s: %s", upd.node, ev.reason, ev.message)
        for attempt in upd.append:
            self.metrics.remediations.labels(step=attempt.step, result=attempt.result).inc()
            start, end = parse_time(attempt.start), parse_time(attempt.end)
            if start and end and attempt.step in budget.WORKING_STEPS:
                self.metrics.duration.labels(step=attempt.step).observe(
                    max(0.0, (end - start).total_seconds())
                )
        self.later(lambda: self._paperwork(upd, node, after))
        self.on_written(upd, after)
        return after

    def _paperwork(self, upd: Update, node: dict, after: NodeView) -> None:
        for ev in upd.events:
            self.cluster.post_event(node, ev.reason, ev.message, ev.type)
        conditions.publish(self.cluster, after)


def write_by_hand(
    cluster: Cluster,
    upd: Update,
    vocab: Vocabulary,
    foreign: Iterable[ForeignSignal],
    *,
    by: str,
    what: str,
    why: str,
) -> NodeView:
    """A change a human asked for (``release``, ``quarantine``, ``reset``), written the
    one way: the Node (RV-guarded), its Events, the NodeCondition, then the audit line
    (who, what, why). No informer and no paperwork thread here: the command waits for
    each write, so its exit status says whether all of it landed."""
    written = cluster.update_node(upd.node, upd.apply_for(vocab))
    for ev in upd.events:
        cluster.post_event(written, ev.reason, ev.message, ev.type)
    after = view_of(written, vocab, foreign)
    conditions.publish(cluster, after)
    audit.record(by, upd.node, what, why, "written")
    return after
