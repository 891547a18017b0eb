"""The ``notify:`` section: chat and pager targets beyond email (Slack, Teams, PagerDuty,
Opsgenie, a webhook, ...), each an Apprise URL with the events it wants.

    notify:
      targets:
        - name: oncall-slack
          url_credential: slack-url      # $CREDENTIALS_DIRECTORY/slack-url
          events: [escalation, breaker]
        - name: ops-webhook
          url_file: /etc/fleetmedic/webhook.url
          events: [escalation, breaker, repaired]

A target's URL usually *is* its secret (a Slack webhook's path, a PagerDuty routing key),
so it is read, like the SMTP password, from a file or a systemd credential; an inline
`url` is accepted only for receivers that need no secret. A profile may override the
whole section (e.g. another team's channel for its pool).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fleetmedic.model.config.types import ConfigPath, Duration, Section

EVENTS = ("escalation", "breaker", "repaired")
"""escalation: a node needs a human (once per episode); breaker: the circuit breaker
tripped; repaired: a node is back in service (verified repair or `fleetmedic release`)."""

Event = Literal["escalation", "breaker", "repaired"]


class TargetConfig(Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][-_.A-Za-z0-9]{0,62}$")
    """Shown in logs instead of the URL (which holds the secret)."""
    url: str | None = None
    """Apprise URL without a secret in it (e.g. `json://alerts.example:8080/fleetmedic`)."""
    url_file: ConfigPath | None = None
    """File whose first line is the Apprise URL (e.g. `slack://T000/B000/XXXX`)."""
    url_credential: str | None = None
    """systemd credential holding the URL ($CREDENTIALS_DIRECTORY/NAME); wins over the file."""
    events: tuple[Event, ...] = ("escalation", "breaker")
    """What this target hears. Default: what needs a human, not the good news."""

    @model_validator(mode="after")
    def _one_url(self) -> TargetConfig:
        given = [f for f in ("url", "url_file", "url_credential") if getattr(self, f)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of url, url_file, url_credential"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if not self.events:
            raise ValueError("events: name at least one of " + ", ".join(EVENTS))
        return self


class NotifyConfig(Section):
    targets: tuple[TargetConfig, ...] = ()
    """Unset: email only (`smtp`)."""
    retry_interval: Duration = 60
    """A failed send is retried this often, in the background: a dead webhook never holds
    the ladder up. Shorter than SMTP's because chat services rate-limit, not queue."""
    tries: int = Field(30, ge=1)
    """Then the message is dropped with an error log (the email and the Node's Events
    still carry it); 30 tries a minute apart ride out a half-hour outage."""
    timeout: Duration = 10
    """Connect and read timeout per send; a hung service must not stall the sender."""

    @model_validator(mode="after")
    def _unique_names(self) -> NotifyConfig:
        names = [t.name for t in self.targets]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise ValueError(f"targets: the name {dup!r} is used twice")
        return self
