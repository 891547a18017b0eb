"""The ladder's chat and pager messages: what the Recorder wrote, told to every target of
the node's profile that wants its event, through the outbox (controller/outbox.py: its
own thread, retried every ``notify.retry_interval`` up to ``notify.tries`` times, kept on
the pause ConfigMap until delivered), while the ladder goes on (a message never blocks a
decision or a Node write).

What triggers a message is what the Recorder wrote: a ``RepairEscalated`` Event (once per
episode, when the escalation is decided), ``RepairReplacing``, ``Repaired`` or
``RepairReleased`` (back in service); the BreakerKeeper posts the breaker trip.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from fleetmedic.adapters import chat
from fleetmedic.controller import channels
from fleetmedic.controller.outbox import Outbox
from fleetmedic.controller.outbox import deliver_now as deliver_once
from fleetmedic.controller.parts import Part
from fleetmedic.errors import FleetmedicError
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import escalation
from fleetmedic.policy.actions import Update
from fleetmedic.policy.history import decode, stamp
from fleetmedic.policy.profiles import assign

log = logging.getLogger(__name__)


class Chatter(Part):
    """One part of the loop (controller/parts.py) that only hears what is written."""

    name = "chat"

    def __init__(
        self,
        cfg: Config,
        stop: Callable[[], threading.Event],
        cluster: str = "",
        outbox: Outbox | None = None,
    ) -> None:
        """``stop``: the controller's stop event (read late: ``run`` replaces it);
        ``outbox``: where messages go (None: one of its own, in memory)."""
        self.cfg, self.cluster = cfg, cluster
        self.outbox = outbox or Outbox(cfg, channels.CHANNELS, stop=stop)

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
            self.post(self._profile_of(view), msg, f"{msg.event}/{view.name}/{upd.at}")

    def breaker(self, profile: str, nodes: list[str], pool: int, window: float) -> None:
        msg = chat.breaker(nodes, pool, window, profile, cluster=self.cluster)
        self.post(profile, msg, f"breaker/{profile}/{stamp(datetime.now(UTC))}")

    def post(self, profile: str, msg: chat.Message, about: str) -> None:
        """``msg`` to each target of ``profile`` that wants its event; ``about``: what it
        is about, unique per occurrence (the letters' ids)."""
        for letter in channels.chat_wanted(
            self.cfg, profile, msg, id=about, what=f"{msg.event} notification"
        ):
            self.outbox.post(letter)

    def _profile_of(self, view: NodeView) -> str:
        return assign([view], self.cfg).profile_of.get(view.name, "default")


def _why(view: NodeView) -> str:
    """The last failed attempt (what brought the node to the replace rung), in one line."""
    for a in reversed(view.annotation_json(keys.ANN_HISTORY, []) or []):
        if isinstance(a, dict) and a.get("result") not in ("pass", "replaced"):
            return f"{a.get('step')} attempt {a.get('attempt')} {a.get('result')}"
    return "fenced at " + view.state


def deliver_now(cfg: Config, view: NodeView, msg: chat.Message) -> list[str]:
    """For one-shot commands (``fleetmedic release``): one try per target of the node's
    profile that wants ``msg``; the failures, as lines to warn with (the command's own
    work is done and stays done)."""
    profile = assign([view], cfg).profile_of.get(view.name, "default")
    failed = []
    about = f"{msg.event}/{view.name}/by-hand"
    for letter in channels.chat_wanted(
        cfg, profile, msg, id=about, what=f"{msg.event} notification"
    ):
        try:
            deliver_once(cfg, letter, channels.CHANNELS)
        except FleetmedicError as exc:
            failed.append(f"{msg.event} notification not sent: {exc}")
    return failed
