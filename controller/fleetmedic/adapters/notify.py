"""Email to the on-call team with yagmail: the escalation (one per node per episode) and
the storm warning when the circuit breaker trips.

yagmail's traps, handled here once:
- it wants ``user=`` (else it appends ``@gmail.com``) and reaches for keyring, or
  even prompts on the terminal, when it has to log in without a password. This
  client always skips yagmail's login and logs in itself with the password read
  from a file or ``$CREDENTIALS_DIRECTORY/<name>`` (systemd LoadCredential), so
  the login name may differ from the From address and nothing is ever prompted;
- any string in ``contents`` that names an existing file becomes an attachment,
  so the body is wrapped in ``yagmail.raw`` and files are passed explicitly;
- ``send()`` returns False after repeated disconnects instead of raising;
- Python's smtplib does not verify the relay's certificate unless given a context.
Every SMTP or network failure becomes :class:`TemporaryError` (retry later);
the password is never logged or put in an error message.
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
import os
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yagmail
from yagmail.error import YagAddressError, YagInvalidEmailAddress

from fleetmedic.errors import ConfigError, TemporaryError
from fleetmedic.model import escalationtext, keys
from fleetmedic.model.config import SmtpConfig, secret_path
from fleetmedic.model.nodestate import NodeView


@dataclasses.dataclass(frozen=True)
class Escalation:
    """Everything the on-call engineer needs, from the Node and the controller."""

    node: str
    address: str | None
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, Any]]
    attempts: Sequence[Mapping[str, Any]]  # the history annotation's entries
    last_results: Any  # the agent's last check results
    last_finding: Any
    reason: str
    escalated_at: str
    episode: int = 0
    evidence: Sequence[str] = ()  # bundle paths on this machine
    cluster: str = ""
    replaced_via: str = ""  # the replace rung's notice: how the node goes to its cloud
    headline: str = ""  # the cause first: "GPU 1 lost (GPU_IS_LOST); reboot did not cure it"
    rma: Any = None  # the episode's RMA case record (policy/rmaflow.py), if a lemon

    @classmethod
    def of(
        cls,
        view: NodeView,
        reason: str,
        escalated_at: str,
        episode: int = 0,
        evidence: Sequence[str | os.PathLike[str]] = (),
        cluster: str = "",
        replaced_via: str = "",
        headline: str = "",
    ) -> Escalation:
        rma = view.annotation_json(keys.ANN_RMA)
        return cls(
            node=view.name,
            address=view.address,
            labels=dict(view.labels),
            taints=[dict(t) for t in view.taints],
            attempts=view.annotation_json(keys.ANN_HISTORY, []) or [],
            last_results=view.annotation_json(keys.ANN_LAST_RESULTS),
            last_finding=view.annotation_json(keys.ANN_LAST_FINDING),
            reason=reason,
            escalated_at=escalated_at,
            episode=episode,
            evidence=[str(p) for p in evidence],
            cluster=cluster,
            replaced_via=replaced_via,
            headline=headline or reason,
            rma=rma if isinstance(rma, Mapping) and rma.get("ep") == episode else None,
        )

    def subject(self) -> str:
        """``gpu-2 needs hands: GPU 1 lost (GPU_IS_LOST); reboot did not cure it``, at most
        78 characters (policy/escalation.py)."""
        verdict = "is being replaced" if self.replaced_via else "needs hands"
        return escalationtext.subject(
            self.node, self.headline or self.reason, verdict, self.cluster
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Storm:
    pool: int
    nodes: Sequence[str]  # nodes that turned unhealthy within the window
    window: float
    threshold_percent: float
    tripped_at: str
    cluster: str = ""
    profile: str = "default"


@dataclasses.dataclass(frozen=True)
class Sent:
    message_id: str
    refused: Mapping[str, Any]  # recipients the relay refused (others got it)
    attached: tuple[str, ...]
    not_attached: tuple[str, ...]  # evidence too big or missing: named in the body instead


class _Client(yagmail.SMTP):
    """yagmail whose login is ours: explicit credentials or none, never keyring."""

    def __init__(self, auth: tuple[str, str] | None, **kwargs: Any) -> None:
        super().__init__(smtp_skip_login=True, **kwargs)
        self._auth = auth

    def login(self) -> None:
        super().login()
        if self._auth:
            self.smtp.login(*self._auth)


def read_password(smtp: SmtpConfig, environ: Mapping[str, str] = os.environ) -> str | None:
    """The password's first line, from the credential or the file; None without a user."""
    if not smtp.user:
        return None
    path = secret_path(smtp.password_file, smtp.password_credential, environ)
    try:
        return path.read_text().splitlines()[0].strip() if path else None
    except (OSError, IndexError) as exc:
        why = getattr(exc, "strerror", None) or "empty file"
        raise ConfigError(f"smtp password file {path}: cannot read: {why}") from None


def send_escalation(
    esc: Escalation, smtp: SmtpConfig, environ: Mapping[str, str] = os.environ
) -> Sent:
    subject = esc.subject()
    report = json.dumps(esc.to_json(), indent=2, default=str).encode()
    attached, not_attached = _pick(esc.evidence, smtp.max_attachment_mb * 2**20 - len(report))
    data = io.BytesIO(report)
    data.name = f"{esc.node}-escalation.json"
    body = escalation_html(esc, not_attached)
    msg_id = f"<fleetmedic.{esc.node}.e{esc.episode}.{_token(esc.escalated_at)}@{_domain(smtp)}>"
    refused = _send(smtp, subject, body, [data, *attached], msg_id, environ)
    return Sent(msg_id, refused, tuple(attached), tuple(not_attached))


def send_storm(storm: Storm, smtp: SmtpConfig, environ: Mapping[str, str] = os.environ) -> Sent:
    where = f" on {storm.cluster}" if storm.cluster else ""
    if storm.profile != "default":
        where += f" (profile {storm.profile})"
    subject = (
        f"[fleetmedic] circuit breaker open{where}: {len(storm.nodes)} of {storm.pool} "
        f"nodes unhealthy within {storm.window:g}s; automation paused"
    )
    body = storm_html(storm)
    msg_id = f"<fleetmedic.storm.{_token(storm.tripped_at)}@{_domain(smtp)}>"
    return Sent(msg_id, _send(smtp, subject, body, [], msg_id, environ), (), ())


def _send(
    smtp: SmtpConfig,
    subject: str,
    html: str,
    attachments: list,
    message_id: str,
    environ: Mapping[str, str],
) -> Mapping[str, Any]:
    password = read_password(smtp, environ)
    context = ssl.create_default_context(cafile=str(smtp.ca_file) if smtp.ca_file else None)
    tls: dict[str, Any] = {
        "smtp_ssl": smtp.tls == "ssl",
        "smtp_starttls": {"context": context} if smtp.tls == "starttls" else False,
    }
    if smtp.tls == "ssl":
        tls["context"] = context
    where = f"smtp {smtp.host}:{smtp.port}"
    try:
        client = _Client(
            (smtp.user, password) if smtp.user and password is not None else None,
            user=smtp.sender,
            host=smtp.host,
            port=smtp.port,
            timeout=smtp.timeout,
            soft_email_validation=False,
            **tls,
        )
    except (YagAddressError, YagInvalidEmailAddress, ValueError) as exc:
        raise ConfigError(f"{where}: bad sender {smtp.sender!r}: {exc}") from None
    try:
        result = client.send(
            to=list(smtp.to),
            subject=subject,
            contents=[yagmail.raw(html)],
            attachments=attachments or None,
            prettify_html=False,
            message_id=message_id,
        )
    except smtplib.SMTPAuthenticationError as exc:
        raise TemporaryError(
            f"{where}: login as {smtp.user} refused ({exc.smtp_code})", smtp.retry_interval
        ) from None
    except (smtplib.SMTPException, OSError) as exc:
        raise TemporaryError(
            f"{where}: {type(exc).__name__}: {_reason(exc)}", smtp.retry_interval
        ) from None
    finally:
        client.close()
    if result is False:
        raise TemporaryError(
            f"{where}: the relay kept disconnecting; not sent", smtp.retry_interval
        )
    return dict(result or {})


# -- the message bodies (inline styles: mail clients ignore <style>) -----------------
_TABLE = 'style="border-collapse:collapse;font:13px sans-serif"'
_CELL = 'style="border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top"'
ATTEMPT_COLUMNS = ("ep", "step", "attempt", "start", "end", "result", "phase", "run_id", "message")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th {_CELL}>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td {_CELL}>{html.escape(str(c))}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table {_TABLE}><tr>{head}</tr>{body}</table>" if rows else "<p>(none)</p>"


def _pre(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
    return f'<pre style="font:12px monospace">{html.escape(text)}</pre>'


def escalation_html(esc: Escalation, not_attached: Sequence[str] = ()) -> str:
    e = html.escape
    attempts = [
        [
            escalationtext.shown_message(str(a.get(c, "")), a.get("phase"))
            if c == "message"
            else a.get(c, "")
            for c in ATTEMPT_COLUMNS
        ]
        for a in esc.attempts
        if isinstance(a, Mapping)
    ]
    taints = [[t.get("key", ""), t.get("value", ""), t.get("effect", "")] for t in esc.taints]
    evidence = [[Path(p).name, "attached"] for p in esc.evidence if p not in not_attached]
    evidence += [[p, "not attached: find it on the controller host"] for p in not_attached]
    if esc.replaced_via:
        head = f"<h2>{e(esc.node)} is being replaced ({e(esc.replaced_via)})</h2>"
        end = (
            "<p>Replace, don't repair: the node is drained and handed to its cloud for a "
            "new instance; its Node and annotations go with it, so this email and the "
            "attached JSON are its record.</p>"
        )
    else:
        head = f"<h2>{e(esc.node)} needs a human</h2>"
        end = (
            f"<p>When the node is fixed: <code>fleetmedic release {e(esc.node)}</code>. "
            "The attached JSON holds all of the above.</p>"
        )
    said = esc.headline or esc.reason
    detail = (
        f"<br><b>Last failed attempt:</b> {e(esc.reason)}"
        if esc.reason and esc.reason != said
        else ""
    )
    parts = [
        head,
        f"<p><b>Why:</b> {e(said)}{detail}<br><b>Address:</b> {e(esc.address or 'unknown')}"
        f"<br><b>Escalated:</b> {e(esc.escalated_at)} (episode {esc.episode})</p>",
        *_rma_html(esc.rma),
        "<h3>Automated attempts</h3>",
        _table(ATTEMPT_COLUMNS, attempts),
        "<h3>Last check results</h3>",
        _pre(esc.last_results or "none recorded"),
        "<h3>Last finding</h3>",
        _pre(esc.last_finding or "none recorded"),
        "<h3>Taints</h3>",
        _table(("key", "value", "effect"), taints),
        "<h3>Labels</h3>",
        _table(("label", "value"), sorted(esc.labels.items())),
        "<h3>Evidence</h3>",
        _table(("bundle", "where"), evidence),
        end,
    ]
    return "".join(parts)


def _rma_html(rma: Any) -> list[str]:
    """The RMA case's part of the email (policy/rmaflow.py's record)."""
    if not isinstance(rma, Mapping):
        return []
    e = html.escape
    rows = [
        [
            g.get("serial", ""),
            g.get("uid", ""),
            g.get("index", ""),
            g.get("family", ""),
            g.get("count", ""),
            ", ".join(f"{c.get('at', '')} {c.get('node', '')}" for c in g.get("chain") or ()),
        ]
        for g in rma.get("gpus") or ()
        if isinstance(g, Mapping)
    ]
    cases = [Path(str(c)).name for c in rma.get("cases") or ()]
    return [
        f"<h3>{e(str(rma.get('summary', 'RMA candidate')))}</h3>",
        "<p>The ladder was not climbed again: this GPU's faults came back after repairs that "
        "did not hold. Send it back to its vendor; the attached case files hold what an RMA "
        "asks for (serials, versions, error counts, diagnostics, its fault history).</p>",
        _table(("serial", "unique id", "GPU", "fault", "episodes", "when, where"), rows),
        f"<p><b>Case files:</b> {e(', '.join(cases) or 'not written (see the controller log)')}"
        f"<br><b>Ticket:</b> {e(str(rma.get('ticket', 'off')))}</p>",
    ]


def _profile_flag(profile: str) -> str:
    return "" if profile == "default" else f" --profile {html.escape(profile)}"


def storm_html(storm: Storm) -> str:
    e = html.escape
    return "".join(
        [
            f"<h2>Circuit breaker open: {len(storm.nodes)} of {storm.pool} nodes turned "
            f"unhealthy within {storm.window:g}s</h2>",
            f"<p>More than {storm.threshold_percent:g}% of the pool at once looks systemic "
            "(network, "
            f"driver rollout, API server), not like single GPUs. fleetmedic stopped all automated "
            f"repair at {e(storm.tripped_at)}; nodes stay fenced.</p>",
            _table(("node",), [[n] for n in storm.nodes]),
            "<p>Find the common cause, then reset the breaker to resume automation: "
            f"<code>fleetmedic breaker reset{_profile_flag(storm.profile)}</code>.</p>",
        ]
    )


def _pick(paths: Sequence[str], budget: float) -> tuple[list[str], list[str]]:
    """Attach what exists and fits, newest evidence first; name the rest."""
    attached, named = [], []
    for path in paths:
        p = Path(path)
        size = p.stat().st_size if p.is_file() else None
        if size is not None and size <= budget:
            attached.append(str(p))
            budget -= size
        else:
            named.append(str(p) + (" (missing)" if size is None else f" ({size} bytes)"))
    return attached, named


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "smtp_error", None) or getattr(exc, "strerror", None) or str(exc)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())[:200] or "no detail"


def _token(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


def _domain(smtp: SmtpConfig) -> str:
    return smtp.sender.rsplit("@", 1)[-1]


# -- domain incidents (policy/domains.py) ---------------------------------------------
@dataclasses.dataclass(frozen=True)
class DomainIncident:
    """One domain incident's page: the domain, its nodes, what they share, their evidence."""

    name: str  # key=value
    incident_id: str
    opened_at: str
    why: str
    size: int  # nodes in the domain
    nodes: Sequence[Mapping[str, Any]]  # per fenced node: name, state, last finding, results
    common: Sequence[str]
    evidence: Sequence[str] = ()  # each node's newest bundle
    cluster: str = ""
    playbook: str = ""  # the domain playbook that runs once over them ("": hold)


def send_domain_incident(
    inc: DomainIncident,
    smtp: SmtpConfig,
    to: Sequence[str] = (),
    environ: Mapping[str, str] = os.environ,
) -> Sent:
    """The incident's one email, to ``to`` (empty: ``smtp.to``), with a JSON of every
    node's last findings and check results and each node's newest evidence bundle."""
    where = f" on {inc.cluster}" if inc.cluster else ""
    subject = (
        f"[fleetmedic] domain incident {inc.name}{where}: {len(inc.nodes)} of {inc.size} "
        "nodes fenced together; their repairs are held"
    )[:200]
    report = json.dumps(dataclasses.asdict(inc), indent=2, default=str).encode()
    attached, not_attached = _pick(inc.evidence, smtp.max_attachment_mb * 2**20 - len(report))
    data = io.BytesIO(report)
    data.name = f"domain-incident-{_token(inc.name)}.json"
    msg_id = f"<fleetmedic.domain.{_token(inc.incident_id)}@{_domain(smtp)}>"
    relay = smtp.model_copy(update={"to": tuple(to)}) if to else smtp
    body = domain_html(inc, not_attached)
    refused = _send(relay, subject, body, [data, *attached], msg_id, environ)
    return Sent(msg_id, refused, tuple(attached), tuple(not_attached))


def domain_html(inc: DomainIncident, not_attached: Sequence[str] = ()) -> str:
    e = html.escape
    rows = [
        [
            n.get("node", ""),
            n.get("state", ""),
            n.get("finding") or "",
            n.get("checks") or "",
            n.get("signals") or "",
        ]
        for n in inc.nodes
    ]
    evidence = [[Path(p).name, "attached"] for p in inc.evidence if p not in not_attached]
    evidence += [[p, "not attached: find it on the controller host"] for p in not_attached]
    return "".join(
        [
            f"<h2>Domain incident {e(inc.name)}: {len(inc.nodes)} of {inc.size} nodes "
            "fenced together</h2>",
            f"<p><b>Why:</b> {e(inc.why)}<br><b>Opened:</b> {e(inc.opened_at)}</p>",
            "<p>A shared part (an NVLink switch tray, a top-of-rack switch, power or cooling) "
            "looks at fault: rebooting the nodes one by one would not mend it. fleetmedic "
            "holds their repairs; the nodes stay fenced.</p>",
            (
                f"<p><b>Domain playbook:</b> {e(inc.playbook)} runs once over the fenced "
                "nodes, then each is verified: those that pass return to service, the others "
                "go to their own ladders, and an email says which.</p>"
                if inc.playbook
                else ""
            ),
            "<h3>What their findings have in common</h3>",
            _table(("shared",), [[c] for c in inc.common]),
            "<h3>Nodes and their last evidence</h3>",
            _table(("node", "state", "last finding", "failing checks", "signals"), rows),
            "<h3>Evidence</h3>",
            _table(("bundle", "where"), evidence),
            "<p>The incident closes by itself when its nodes pass. To hand the nodes back to "
            f"their own ladders: <code>fleetmedic domain release {e(inc.name)}</code>.</p>",
        ]
    )


@dataclasses.dataclass(frozen=True)
class DomainClosed:
    """The close of a domain incident whose playbook ran (policy/domains_play.py)."""

    name: str
    incident_id: str
    opened_at: str
    closed_at: str
    summary: str  # what the playbook did and which nodes returned, in one line
    play: Mapping[str, Any]  # its record: playbook, nodes, outcome, passed, failed, runs
    request_id: str
    cluster: str = ""


def send_domain_closed(
    inc: DomainClosed,
    smtp: SmtpConfig,
    to: Sequence[str] = (),
    environ: Mapping[str, str] = os.environ,
) -> Sent:
    """The incident's closing email, in the thread of its opening one (``In-Reply-To`` is
    not set by yagmail: the subject names the incident instead)."""
    where = f" on {inc.cluster}" if inc.cluster else ""
    passed, nodes = inc.play.get("passed") or [], inc.play.get("nodes") or []
    subject = (
        f"[fleetmedic] domain incident {inc.name}{where} closed: playbook "
        f"{inc.play.get('playbook')} ran, {len(passed)} of {len(nodes)} nodes returned"
    )[:200]
    msg_id = f"<fleetmedic.domain.closed.{_token(inc.incident_id)}@{_domain(smtp)}>"
    relay = smtp.model_copy(update={"to": tuple(to)}) if to else smtp
    refused = _send(relay, subject, domain_closed_html(inc), [], msg_id, environ)
    return Sent(msg_id, refused, (), ())


def domain_closed_html(inc: DomainClosed) -> str:
    e = html.escape
    results = inc.play.get("results") or {}
    passed = set(inc.play.get("passed") or ())
    rows = [
        [
            n,
            results.get(n, ""),
            "returned to service" if n in passed else "still failing: its own ladder",
        ]
        for n in inc.play.get("nodes") or ()
    ]
    return "".join(
        [
            f"<h2>Domain incident {e(inc.name)} closed</h2>",
            f"<p><b>Opened:</b> {e(inc.opened_at)}<br><b>Closed:</b> {e(inc.closed_at)}</p>",
            f"<p>{e(inc.summary)}</p>",
            "<h3>The playbook, then the verify, per node</h3>",
            _table(("node", "playbook", "after the verify"), rows),
            f"<p>Playbook runs: {e(str(inc.play.get('runs', 1)))} (more than one only when "
            "a controller restart resumed it; its roles act once per request id "
            f"<code>{e(inc.request_id)}</code>).</p>",
            _pre(dict(inc.play)),
        ]
    )
