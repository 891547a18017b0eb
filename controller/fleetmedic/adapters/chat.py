"""Chat and pager notifications (Slack, Teams, PagerDuty, Opsgenie, webhooks, ...) through
Apprise.

Why Apprise rather than one client per service: it is a well-kept library (monthly
releases, 100+ services behind one URL syntax, pure Python with only requests, PyYAML,
click and markdown underneath), so a site names its service in the config, e.g.
``slack://T/B/token`` or ``pagerduty://integration@apikey``, and we carry no per-service
code. Its traps, handled here once:

- ``Apprise.notify()`` never raises for a failed delivery: it logs and returns False.
  False (and any exception it lets through) becomes :class:`TemporaryError`, retried by the
  controller's sender (controller/chatter.py) like a dead SMTP relay;
- ``Apprise.add()`` returns False for a URL it cannot parse: a :class:`ConfigError`
  naming the target, never the URL, which usually holds the secret (a webhook's path);
- its default timeouts are 4 s connect and 4 s read per request; ours come from the
  config through the universal ``cto``/``rto`` URL parameters.

The messages carry the email's facts, shortened for chat: node, why, the attempts, the
last finding, how to release it (the email and its JSON attachment keep the whole record).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fleetmedic.errors import ConfigError, TemporaryError
from fleetmedic.model import escalationtext
from fleetmedic.model.config import TargetConfig, secret_path

CHAT_LIMIT = 1800
"""Characters of a message body: under Slack's 3,000 per section and Teams' card limits."""
ATTEMPTS_SHOWN = 6

# Apprise logs every failed delivery at WARNING with the service's answer; at DEBUG it
# logs the request URL, which can hold the webhook's secret path.
logging.getLogger("apprise").setLevel(logging.WARNING)


@dataclasses.dataclass(frozen=True)
class Message:
    event: str  # escalation | breaker | repaired
    title: str
    body: str
    failure: bool = True  # Apprise's notify type: failure (red) or success (green)


def read_url(target: TargetConfig, environ: Mapping[str, str] = os.environ) -> str:
    """The target's Apprise URL: inline, or the first line of its file or credential."""
    if target.url:
        return target.url
    path = secret_path(target.url_file, target.url_credential, environ)
    try:
        return path.read_text().splitlines()[0].strip() if path else ""
    except (OSError, IndexError) as exc:
        why = getattr(exc, "strerror", None) or "empty file"
        raise ConfigError(f"notify target {target.name}: cannot read {path}: {why}") from None


def send(
    target: TargetConfig,
    message: Message,
    timeout: float = 10,
    environ: Mapping[str, str] = os.environ,
) -> None:
    """Deliver ``message`` to ``target`` once; TemporaryError if the service failed."""
    import apprise  # here: its 100+ plugins load in ~0.5 s, paid only by sites that chat

    url = read_url(target, environ)
    sep = "&" if "?" in url else "?"
    ap = apprise.Apprise()
    if not ap.add(f"{url}{sep}cto={timeout:g}&rto={timeout:g}"):
        raise ConfigError(f"notify target {target.name}: not an Apprise URL this version knows")
    kind = apprise.NotifyType.FAILURE if message.failure else apprise.NotifyType.SUCCESS
    try:
        ok = ap.notify(
            title=message.title,
            body=message.body,
            notify_type=kind,
            body_format=apprise.NotifyFormat.TEXT,
        )
    except Exception as exc:  # a plugin's bug must not kill the sender
        raise TemporaryError(
            f"notify target {target.name}: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    if not ok:
        raise TemporaryError(f"notify target {target.name}: delivery failed (see apprise log)")


# -- the messages -----------------------------------------------------------------------
def escalation(
    node: str,
    reason: str,
    attempts: Sequence[Mapping[str, Any]],
    last_finding: Any,
    episode: int = 0,
    cluster: str = "",
) -> Message:
    """``reason`` is the escalation's headline (policy/escalation.py): the title leads with
    it, the body holds the bookkeeping."""
    lines = [f"Why: {reason} (episode {episode})"]
    shown = [a for a in attempts if isinstance(a, Mapping)][-ATTEMPTS_SHOWN:]
    if shown:
        lines.append("Attempts (oldest first):")
        lines += [
            "- "
            + " ".join(
                str(x) for x in (a.get("step"), a.get("attempt"), a.get("result")) if x is not None
            )
            + (f" at {a['phase']}" if a.get("phase") else "")
            + (f" ({a.get('end') or a.get('start')})" if a.get("end") or a.get("start") else "")
            for a in shown
        ]
    lines.append(f"Last finding: {_short(last_finding) if last_finding else 'none recorded'}")
    lines.append(f"When fixed: fleetmedic release {node}")
    title = escalationtext.subject(node, reason, "needs hands", cluster)
    return Message("escalation", f"[fleetmedic] {title}", _cap("\n".join(lines)))


def replacing(node: str, reason: str, last_finding: Any, via: str, cluster: str = "") -> Message:
    """The replace rung's notice (an escalation's event: the team learns of it as of one)."""
    lines = [
        f"Why: {reason}",
        f"Last finding: {_short(last_finding) if last_finding else 'none recorded'}",
        f"Replace, don't repair: drained and handed to the cloud ({via}); the email carries "
        "the evidence",
    ]
    title = escalationtext.subject(node, reason, "is being replaced", cluster)
    return Message("escalation", f"[fleetmedic] {title}", _cap("\n".join(lines)))


def breaker(
    nodes: Sequence[str], pool: int, window: float, profile: str, cluster: str = ""
) -> Message:
    where = f" on {cluster}" if cluster else ""
    of = "" if profile == "default" else f" (profile {profile})"
    more = f" and {len(nodes) - 20} more" if len(nodes) > 20 else ""
    shown = ", ".join(list(nodes)[:20]) + more
    return Message(
        "breaker",
        f"[fleetmedic] circuit breaker open{where}{of}: automation paused",
        _cap(
            f"{len(nodes)} of {pool} nodes turned unhealthy within {window:g}s: {shown}. "
            "Nodes stay fenced. Find the common cause, then "
            f"`fleetmedic breaker reset{'' if profile == 'default' else ' --profile ' + profile}`."
        ),
    )


def repaired(node: str, how: str, cluster: str = "") -> Message:
    where = f" on {cluster}" if cluster else ""
    return Message(
        "repaired", f"[fleetmedic] {node}{where} is back in service", _cap(how), failure=False
    )


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return " ".join(text.split())[:400]


def _cap(text: str) -> str:
    return text if len(text) <= CHAT_LIMIT else text[: CHAT_LIMIT - 1] + "…"
