"""``fleetmedic status``: one row per node, from its Node alone (no controller needed).

The row says the node's state, since when, what is under way, this episode's attempts,
the last finding, the driver errors no catalog rule knows (the agent's safety net: how
many this boot, and the last line), on fleets that sweep when the node was last swept
and the result, and for a node that went through the quarantine rung its last recommendation;
``render_status`` lays rows out as the table an on-call engineer reads, ``--json`` prints
the rows themselves.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy import netcount, phases, quarantine
from fleetmedic.policy.history import decode, last_episode, of_episode, parse_time
from fleetmedic.policy.inflight import Escalated, InFlight
from fleetmedic.policy.sweep import LastSweep

GATE_PHASES = phases.statuses()
"""The return gate's phases (GPU partitions put back, the burn-in), named as operators
look for them while a node waits to come back (each phase's ``status``, policy/phases/)."""
# the worst first: manual, then the highest rungs, healthy last
STATE_ORDER = {s: i for i, s in enumerate((*reversed(REPAIR_STATES), "healthy"))}


def node_status(v: NodeView, at: datetime, profile: str = "default") -> dict[str, Any]:
    """One node's row for ``fleetmedic status`` (also its ``--json`` entry)."""
    history = decode(v.annotations.get(keys.ANN_HISTORY))
    ep = last_episode(history)
    fl = InFlight.read(v.annotations)
    if fl is not None:
        ep = fl.ep
    esc = Escalated.decode(v.annotations.get(keys.ANN_ESCALATED))
    attempts = [a.to_json() for a in of_episode(history, ep)] if (v.in_repair or fl) else []
    since = None
    if v.in_repair:  # fenced by the agent: no transition of ours yet, so when work began
        since = (
            v.annotations.get(keys.ANN_STATE_SINCE)
            or (fl.step_start if fl and fl.step == v.state else None)
            or (attempts[0]["start"] if attempts else None)
        )
    if fl is not None:
        doing = f"{fl.step}#{fl.attempt} {fl.phase} {fl.status}"
        if fl.phase in GATE_PHASES:  # the return gate, in capitals so it stands out
            doing = f"{GATE_PHASES[fl.phase]}: {doing}"
    elif esc is not None and v.state == "manual":
        doing = f"escalated, email {'sent ' + esc.sent if esc.sent else 'pending'}"
    elif v.maintenance:
        doing = "sweep under way (maintenance taint)"
    elif isinstance(replaced := v.annotation_json(keys.ANN_REPLACED), dict):
        doing = f"handed to the cloud at {replaced.get('at', '?')}; waiting for it to go"
    else:
        doing = ""
    asked = quarantine.requested(v)
    if asked and not (fl and fl.phase == quarantine.PHASE):
        doing = "; ".join(d for d in (doing, f"quarantine requested by {asked}") if d)
    q = quarantine.read(v)
    entered_by = v.annotations.get(keys.ANN_ENTERED_BY)
    if entered_by:
        fenced_by = entered_by
    elif v.in_repair:
        fenced_by = "fleetmedic"
    else:  # another tool's signal we have not acted on (yet), or none
        fenced_by = ",".join(sorted({s.tool for s in v.foreign}))
    slurm_owner = v.labels.get(keys.LABEL_SLURM_OWNER)  # someone else's Slurm drain
    if slurm_owner and not v.in_repair:
        fenced_by = slurm_owner
    swept = LastSweep.of(v)
    monitor = v.annotation_json(keys.ANN_MONITOR_COUNTS)
    net_count, net_last = netcount.summary(
        monitor.get("net") if isinstance(monitor, dict) else None
    )
    return {
        "name": v.name,
        "profile": profile,
        "fenced_by": fenced_by,
        "state": v.state,
        "slow_network": v.slow_network,
        "since": since,
        "age": _age(since, at),
        "doing": doing,
        "episode": ep or None,
        "attempts": attempts,
        "last_finding": last_finding(v, attempts),
        "foreign_signals": list(v.foreign_signals)
        + ([f"Slurm drain ({slurm_owner}): not ours, never touched"] if slurm_owner else []),
        "unschedulable": v.unschedulable,
        "address": v.address,
        "vendor": v.vendor,
        "last_sweep": (
            {"at": swept.at, "result": swept.result, "level": swept.level, "summary": swept.summary}
            if swept
            else None
        ),
        "quarantine": (
            {k: q.get(k) for k in ("recommendation", "at", "level", "why", "summary", "run")}
            if q
            else None
        ),
        "quarantine_requested": asked,
        "last_sweep_age": _age(swept.at, at) if swept else "",
        "unclassified": {"count": net_count, "last": net_last} if net_count else None,
    }


def last_finding(v: NodeView, attempts: list[dict]) -> str:
    finding = v.annotation_json(keys.ANN_LAST_FINDING)
    if isinstance(finding, dict):
        if finding.get("summary") or (finding.get("message") and not finding.get("kind")):
            return str(finding.get("summary") or finding.get("message"))
        what = {"xid": "Xid", "sxid": "SXid"}.get(str(finding.get("kind")), finding.get("kind"))
        code = f" {finding['code']}" if finding.get("code") is not None else ""
        pci = f" on {finding['pci']}" if finding.get("pci") else ""
        msg = f": {finding['message']}" if finding.get("message") else ""
        return f"{what}{code}{pci}{msg}"
    if finding:
        return str(finding)
    failed = [a for a in attempts if a.get("result") not in ("pass", "escalated", "released")]
    if failed:
        a = failed[-1]
        return f"{a['step']} {a['result']}: {a.get('message', '')}".rstrip(": ")
    return ", ".join(v.foreign_signals)


def _sweep_cell(row: dict, as_time: bool) -> str:
    """``pass 3h05m ago`` (or ``pass 14:02:11``)."""
    swept = row.get("last_sweep")
    if not swept:
        return ""
    when = swept["at"][11:19] if as_time else f"{row.get('last_sweep_age', '')} ago"
    return f"{swept['result']} {when}"


def _quarantine_cell(row: dict, at_time: bool) -> str:
    """``replace (L3 14:02:11)``: the last recommendation, its level and when."""
    q = row.get("quarantine")
    if not q:
        return ""
    when = f" {str(q.get('at') or '')[11:19]}" if at_time else ""
    return f"{q['recommendation']} (L{q.get('level', '?')}{when})"


def _net_cell(row: dict) -> str:
    """``3: amdgpu 0000:c5:00.0: amdgpu: ...``: how many this boot, and the last (cut)."""
    net = row.get("unclassified")
    if not net:
        return ""
    last = net["last"] if len(net["last"]) <= 60 else net["last"][:57] + "..."
    return f"{net['count']}: {last}"


def _age(stamp: str | None, at: datetime) -> str:
    """``42s``, ``5m12s``, ``3h05m``, ``2d04h``."""
    t = parse_time(stamp)
    if t is None:
        return ""
    s = max(0, int((at - t).total_seconds()))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def render_status(
    rows: list[dict], hidden: int = 0, width: int = 200, since_as_time: bool = False
) -> str:
    """The status table. ``since_as_time``: the SINCE column as a UTC time, not an age."""
    profiles = any(r.get("profile", "default") != "default" for r in rows)
    others = any(r.get("fenced_by") not in (None, "", "fleetmedic") for r in rows)
    head: tuple[str, ...] = ("NODE", "STATE", "SINCE", "DOING", "ATTEMPTS", "LAST FINDING")
    if others:  # who fenced it, only when other tools did some of it
        head = (*head[:2], "BY", *head[2:])
    sweeps = any(r.get("last_sweep") for r in rows)
    if sweeps:  # LAST SWEEP only on fleets that sweep idle nodes
        head = (*head[:-1], "LAST SWEEP", head[-1])
    quarantined = any(r.get("quarantine") for r in rows)
    if quarantined:  # QUARANTINE only once some node went through the rung
        head = (*head[:-1], "QUARANTINE", head[-1])
    unknown = any(r.get("unclassified") for r in rows)
    if unknown:  # UNCLASSIFIED only where the agent's net caught driver errors
        head = (*head[:-1], "UNCLASSIFIED", head[-1])
    if profiles:  # a PROFILE column only where there are profiles to tell apart
        head = ("NODE", "PROFILE", *head[1:])
    table = [head]
    for r in rows:
        state = r["state"] + ("+slow-net" if r["slow_network"] else "")
        attempts = str(len([a for a in r["attempts"] if a.get("step") != "manual"]))
        since = r["age"] and f"{r['age']} ago"
        if since_as_time:
            since = (r["since"] or "")[11:19]
        cells: tuple[str, ...] = (
            state,
            since,
            r["doing"],
            attempts if r["attempts"] else "",
            r["last_finding"],
        )
        if sweeps:
            cells = (*cells[:-1], _sweep_cell(r, since_as_time), cells[-1])
        if quarantined:
            cells = (*cells[:-1], _quarantine_cell(r, at_time=since_as_time), cells[-1])
        if unknown:
            cells = (*cells[:-1], _net_cell(r), cells[-1])
        if others:
            cells = (state, r.get("fenced_by") or "", *cells[1:])
        table.append((r["name"], r.get("profile", ""), *cells) if profiles else (r["name"], *cells))
    widths = [max(len(row[i]) for row in table) for i in range(len(head) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in table
    ]
    lines = [ln.rstrip()[:width] for ln in lines]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    if hidden:
        counts["healthy"] = counts.get("healthy", 0) + hidden
    summary = ", ".join(f"{counts[s]} {s}" for s in STATE_ORDER if counts.get(s))
    lines.append(
        f"\n{summary or 'no nodes'}"
        + (f" ({hidden} healthy not shown; --all lists them)" if hidden else "")
    )
    return "\n".join(lines)
