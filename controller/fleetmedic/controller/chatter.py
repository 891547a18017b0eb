"""Chat and pager notifications off the ladder's path: each message goes to every target
of the node's profile that wants its event, on a thread of its own, and a failed send is
retried every ``notify.retry_interval`` up to ``notify.tries`` times, like a dead SMTP
relay, while the ladder goes on (a send never blocks a decision or a Node write).

What triggers a message is what the Recorder wrote: a ``RepairEscalated`` Event (once per
episode, when the escalation is decided), ``Repaired`` or ``RepairReleased`` (back in
service); the BreakerKeeper posts the breaker trip.

Known gap: pending retries live in memory, so a controller restart drops a message still
being retried (the escalation email's retry is on the Node and survives; so does the
Node's Event).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from fleetmedic import logcontext
from fleetmedic.adapters import chat
from fleetmedic.errors import ConfigError, FleetmedicError
from fleetmedic.model import keys
from fleetmedic.model.config import Config, NotifyConfig, TargetConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import escalation
from fleetmedic.policy.actions import Update
from fleetmedic.policy.history import decode
from fleetmedic.policy.profiles import assign

log = logging.getLogger(__name__)

Send = Callable[[TargetConfig, chat.Message, float], None]


class Chatter:
    def __init__(
        self,
        cfg: Config,
        stop: Callable[[], threading.Event],
        send: Send = chat.send,
        cluster: str = "",
    ) -> None:
        """``stop``: the controller's stop event (read late: ``run`` replaces it)."""
        self.cfg, self.stop, self._send, self.cluster = cfg, stop, send, cluster
        self._due: list[tuple[float, int, TargetConfig, NotifyConfig, chat.Message, int]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    # -- what to say --------------------------------------------------------------------
    def written(self, upd: Update, view: NodeView) -> None:
        """The Recorder wrote ``upd``; ``view`` is the Node as written. Never raises: a
        notification's trouble must not fail the write it reports."""
        try:
            self._written(upd, view)
        except Exception:
            log.exception("%s: chat notification not queued", upd.node)

    def _written(self, upd: Update, view: NodeView) -> None:
        for ev in upd.events:
            if ev.reason == "RepairEscalated":
                msg = chat.escalation(
                    view.name,
                    ev.message,
                    view.annotation_json(keys.ANN_HISTORY, []) or [],
                    view.annotation_json(keys.ANN_LAST_FINDING),
                    episode=upd.append[-1].ep if upd.append else 0,
                    cluster=self.cluster,
                )
            elif ev.reason == "RepairReplacing":
                ep = max((a.ep for a in decode(view.annotations.get(keys.ANN_HISTORY))), default=0)
                msg = chat.replacing(
                    view.name,
                    escalation.headline(view, ep, _why(view)),
                    view.annotation_json(keys.ANN_LAST_FINDING),
                    self.cfg.profile(self._profile_of(view)).cloud.replace_via,
                    cluster=self.cluster,
                )
            elif ev.reason in ("Repaired", "RepairReleased"):
                msg = chat.repaired(view.name, ev.message, cluster=self.cluster)
            else:
                continue
            self.post(self._profile_of(view), msg)

    def breaker(self, profile: str, nodes: list[str], pool: int, window: float) -> None:
        self.post(profile, chat.breaker(nodes, pool, window, profile, cluster=self.cluster))

    def post(self, profile: str, msg: chat.Message) -> None:
        notify = self.cfg.profile(profile).notify
        targets = [t for t in notify.targets if msg.event in t.events]
        if not targets:
            return
        with self._cond:
            for t in targets:
                heapq.heappush(self._due, (time.monotonic(), next(self._seq), t, notify, msg, 1))
            self._cond.notify()
            if self._thread is None:
                self._thread = logcontext.thread(self._run, name="chat")
                self._thread.start()

    def _profile_of(self, view: NodeView) -> str:
        return assign([view], self.cfg).profile_of.get(view.name, "default")

    # -- the sender ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self.stop().is_set():
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    wait = self._due[0][0] - time.monotonic() if self._due else 1.0
                    self._cond.wait(min(max(wait, 0.05), 1.0))
                    if self.stop().is_set():
                        return
                _, _, target, notify, msg, tries = heapq.heappop(self._due)
            self._deliver(target, notify, msg, tries)

    def _deliver(
        self, target: TargetConfig, notify: NotifyConfig, msg: chat.Message, tries: int
    ) -> None:
        try:
            self._send(target, msg, notify.timeout)
            log.info("%s notification sent to %s: %s", msg.event, target.name, msg.title)
            return
        except ConfigError as exc:
            log.error(
                "%s notification to %s not sent (not retried): %s", msg.event, target.name, exc
            )
            return
        except FleetmedicError as exc:
            why = str(exc)
        if tries >= notify.tries:
            log.error(
                "%s notification to %s dropped after %d tries: %s",
                msg.event,
                target.name,
                tries,
                why,
            )
            return
        log.warning(
            "%s notification to %s not sent (try %d of %d, next in %gs): %s",
            msg.event,
            target.name,
            tries,
            notify.tries,
            notify.retry_interval,
            why,
        )
        due = time.monotonic() + notify.retry_interval
        with self._cond:
            heapq.heappush(self._due, (due, next(self._seq), target, notify, msg, tries + 1))


def _why(view: NodeView) -> str:
    """The last failed attempt (what brought the node to the replace rung), in one line."""
    for a in reversed(view.annotation_json(keys.ANN_HISTORY, []) or []):
        if isinstance(a, dict) and a.get("result") not in ("pass", "replaced"):
            return f"{a.get('step')} attempt {a.get('attempt')} {a.get('result')}"
    return "fenced at " + view.state


def deliver_now(
    cfg: Config, view: NodeView, msg: chat.Message, send: Send = chat.send
) -> list[str]:
    """For one-shot commands (``fleetmedic release``): one try per target of the node's
    profile that wants ``msg``; the failures, as lines to warn with (the command's own
    work is done and stays done)."""
    profile = assign([view], cfg).profile_of.get(view.name, "default")
    notify = cfg.profile(profile).notify
    failed = []
    for target in notify.targets:
        if msg.event in target.events:
            try:
                send(target, msg, notify.timeout)
            except FleetmedicError as exc:
                failed.append(f"{msg.event} notification not sent: {exc}")
    return failed
