"""The outbox's channels (controller/outbox.py): how a letter reaches its target.

- ``email``: the site relay, through adapters/notify.py. The payload names the message
  (``escalation``, ``storm``, ``domain_incident``, ``domain_closed``: :data:`EMAILS`), its
  fields, and optionally its recipients (``to``; else the profile's ``smtp.to``). Tried
  every ``smtp.retry_interval``, :data:`EMAIL_TRIES` times.
- ``chat``: one of the profile's ``notify.targets`` by name, through adapters/chat.py
  (Apprise). Tried every ``notify.retry_interval``, ``notify.tries`` times.

A new target kind adds one entry to :data:`CHANNELS` (see controller/outbox.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from fleetmedic.adapters import chat, notify
from fleetmedic.controller.outbox import Channel, Letter
from fleetmedic.errors import ConfigError
from fleetmedic.model.config import Config, TargetConfig

EMAIL_TRIES = 10
"""Tries of an email the outbox keeps (the ladder's escalation email is retried by the
ladder itself, on the Node): ten at ``smtp.retry_interval`` ride out a relay's restart."""

EMAILS: dict[str, tuple[type, Callable[..., notify.Sent]]] = {
    "escalation": (notify.Escalation, notify.send_escalation),
    "storm": (notify.Storm, notify.send_storm),
    "domain_incident": (notify.DomainIncident, notify.send_domain_incident),
    "domain_closed": (notify.DomainClosed, notify.send_domain_closed),
}
"""What an email letter can carry: its message's dataclass and the function that sends it."""


# -- email ------------------------------------------------------------------------------
def email(
    message: Any, *, id: str, what: str, profile: str = "default", to: Sequence[str] = ()
) -> Letter:
    """A letter of one of :data:`EMAILS`' messages (to ``to``, else ``smtp.to``)."""
    kind = next(k for k, (cls, _) in EMAILS.items() if isinstance(message, cls))
    payload: dict[str, Any] = {"message": kind, "fields": dataclasses.asdict(message)}
    if to:
        payload["to"] = list(to)
    return Letter(
        id=id, channel="email", target="smtp", what=what, payload=payload, profile=profile
    )


def _profile(cfg: Config, letter: Letter) -> Config:
    try:
        return cfg.profile(letter.profile)
    except ValueError:
        raise ConfigError(f"profile {letter.profile}: no longer in the config") from None


def _send_email(cfg: Config, letter: Letter) -> str:
    smtp = _profile(cfg, letter).smtp
    if smtp is None:
        raise ConfigError("no smtp: section in the config")
    kind = letter.payload.get("message")
    if kind not in EMAILS:
        raise ConfigError(f"unknown email {kind!r}")
    cls, send = EMAILS[kind]
    message = cls(**letter.payload.get("fields", {}))
    to = letter.payload.get("to") or ()
    sent = send(message, smtp, to) if to else send(message, smtp)
    report = 1 if kind in ("escalation", "domain_incident") else 0  # (the JSON attached)
    return f"{sent.message_id} ({len(sent.attached) + report} attachment(s))"


def _email_schedule(cfg: Config, letter: Letter) -> tuple[float, int]:
    smtp = _profile(cfg, letter).smtp
    return (smtp.retry_interval if smtp else 300.0), EMAIL_TRIES


# -- chat -------------------------------------------------------------------------------
def chat_to(
    target: TargetConfig, msg: chat.Message, *, id: str, what: str, profile: str = "default"
) -> Letter:
    return Letter(
        id=f"chat/{target.name}/{id}",
        channel="chat",
        target=target.name,
        what=what,
        payload=dataclasses.asdict(msg),
        profile=profile,
    )


def chat_wanted(
    cfg: Config, profile: str, msg: chat.Message, *, id: str, what: str
) -> list[Letter]:
    """A letter to each of the profile's targets that wants ``msg``'s event."""
    return [
        chat_to(t, msg, id=id, what=what, profile=profile)
        for t in cfg.profile(profile).notify.targets
        if msg.event in t.events
    ]


def _target(cfg: Config, letter: Letter) -> TargetConfig:
    for t in _profile(cfg, letter).notify.targets:
        if t.name == letter.target:
            return t
    raise ConfigError(f"notify target {letter.target}: no longer in the config")


def _send_chat(cfg: Config, letter: Letter) -> str:
    msg = chat.Message(**letter.payload)
    chat.send(_target(cfg, letter), msg, _profile(cfg, letter).notify.timeout)
    return msg.title


def _chat_schedule(cfg: Config, letter: Letter) -> tuple[float, int]:
    n = _profile(cfg, letter).notify
    return n.retry_interval, n.tries


CHANNELS: dict[str, Channel] = {
    "email": Channel(_send_email, _email_schedule),
    "chat": Channel(_send_chat, _chat_schedule),
}
