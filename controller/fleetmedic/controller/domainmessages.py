"""What a domain incident tells people: one email and one chat message when it opens,
and, when its playbook ran, one of each when it closes (what the playbook did, which
nodes returned). Letters for the outbox (controller/outbox.py), which retries and keeps
them; this module only says what they hold and to whom they go.

Recipients: the domain's ``to`` (else ``smtp.to``) for email; the domain's ``targets`` by
name for chat, else every target that wants ``breaker`` events (a domain incident is a
breaker of one domain).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from fleetmedic.adapters import chat, notify, runner
from fleetmedic.controller import channels
from fleetmedic.controller.outbox import Letter
from fleetmedic.model import keys
from fleetmedic.model.config import Config, DomainConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import domains, domains_play
from fleetmedic.policy.domains import Incident


def page(
    cfg: Config, inc: Incident, fenced: Sequence[NodeView], size: int, cluster: str
) -> notify.DomainIncident:
    """The incident's page: each fenced node's last finding and failing checks, what they
    have in common, each node's newest evidence bundle."""
    rows = []
    evidence: list[str] = []
    for v in fenced:
        finding = v.annotation_json(keys.ANN_LAST_FINDING)
        results = v.annotation_json(keys.ANN_LAST_RESULTS)
        failing = (
            {c: e for c, e in results.items() if isinstance(e, dict) and e.get("status") != "ok"}
            if isinstance(results, dict)
            else {}
        )
        rows.append(
            {
                "node": v.name,
                "state": v.state,
                "finding": _one(finding),
                "checks": _one(failing) if failing else "",
                "signals": ", ".join(v.foreign_signals),
                "last_finding": finding,
                "last_results": results,
            }
        )
        evidence += runner.evidence_for(v.name, cfg.ansible)[:1]
    return notify.DomainIncident(
        name=inc.name,
        incident_id=inc.id,
        opened_at=inc.opened_at,
        why=inc.why,
        size=size,
        nodes=rows,
        common=domains.common(fenced),
        evidence=evidence,
        cluster=cluster,
        playbook=inc.play.playbook if inc.play else "",
    )


def opened(
    cfg: Config, inc: Incident, pg: notify.DomainIncident, domain: DomainConfig | None
) -> list[Letter]:
    """The opening's email (with SMTP configured) and chat message."""
    letters = []
    if cfg.smtp is not None:
        letters.append(
            channels.email(
                pg,
                id=f"email/domain/{inc.id}/opened",
                what=f"domain incident {inc.name}'s email",
                to=domain.to if domain else (),
            )
        )
    where = f" on {pg.cluster}" if pg.cluster else ""
    shared = "; ".join(pg.common[:5]) or "nothing recorded in common"
    body = (
        f"{inc.why}. Nodes: {', '.join(inc.nodes)}. In common: {shared}. Their repairs "
        f"are held; they stay fenced. `fleetmedic domain release {inc.name}` hands them "
        "back to their own ladders."
    )
    msg = chat.Message(
        "breaker",
        f"[fleetmedic] domain incident {inc.name}{where}: {len(inc.nodes)} nodes fenced together",
        body[: chat.CHAT_LIMIT],
    )
    return letters + _chat(cfg, msg, domain, f"domain/{inc.id}/opened")


def closed(cfg: Config, inc: Incident, domain: DomainConfig | None, cluster: str) -> list[Letter]:
    """The close of an incident whose playbook ran: what it did, which nodes returned
    (email and chat, to whom the opening went)."""
    assert inc.play is not None
    letters = []
    if cfg.smtp is not None:
        done = notify.DomainClosed(
            name=inc.name,
            incident_id=inc.id,
            opened_at=inc.opened_at,
            closed_at=inc.closed_at or "",
            summary=inc.why,
            play=inc.play.to_json(),
            request_id=domains_play.request_id(inc.id),
            cluster=cluster,
        )
        letters.append(
            channels.email(
                done,
                id=f"email/domain/{inc.id}/closed",
                what=f"domain incident {inc.name}'s closing email",
                to=domain.to if domain else (),
            )
        )
    where = f" on {cluster}" if cluster else ""
    msg = chat.Message(
        "breaker",
        f"[fleetmedic] domain incident {inc.name}{where} closed: "
        f"{len(inc.play.passed)} of {len(inc.play.nodes)} nodes returned",
        inc.why[: chat.CHAT_LIMIT],
    )
    return letters + _chat(cfg, msg, domain, f"domain/{inc.id}/closed")


def _chat(cfg: Config, msg: chat.Message, domain: DomainConfig | None, about: str) -> list[Letter]:
    named = set(domain.targets) if domain and domain.targets else None
    return [
        channels.chat_to(t, msg, id=about, what="domain notification")
        for t in cfg.notify.targets
        if (t.name in named if named is not None else "breaker" in t.events)
    ]


def _one(value: object) -> str:
    """A finding or a check summary in one short line."""
    if isinstance(value, dict):
        for k in ("rule", "summary", "msg"):
            if value.get(k):
                return str(value[k])[:160]
        return json.dumps(value, sort_keys=True)[:160]
    return "" if value is None else str(value)[:160]
