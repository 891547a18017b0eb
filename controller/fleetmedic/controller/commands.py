"""The controller's commands that only read: ``status``, ``plan``, ``history``.

- ``status [--json] [--all]``: nodes by state, since when, what is under way, attempts
  in the current episode, last finding. Healthy nodes only with ``--all``.
- ``plan [--json]``: what the next cycle would do and what the safety gate would hold.
- ``history NODE [--json] [--limit N]``: a node's repair attempts and Events.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from fleetmedic import clikit
from fleetmedic.controller.cli import all_clusters, common, connect, now, views
from fleetmedic.errors import ConfigError, FleetmedicError, NotFoundError
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView

if TYPE_CHECKING:
    from fleetmedic.adapters.cluster import Cluster
    from fleetmedic.policy.profiles import Assignment


# -- status ---------------------------------------------------------------------------
@click.command(
    "status",
    epilog=clikit.epilog("fleetmedic status", "fleetmedic status --all --json | jq '.[].state'"),
)
@common
@clikit.json_option("Print JSON instead of a table.")
@click.option("--all", "show_all", is_flag=True, help="Include healthy nodes.")
@all_clusters
def status(cfg: Config, kubeconfig: str | None, as_json: bool, show_all: bool) -> None:
    """Show nodes by repair state (with `clusters:`, grouped by cluster).

    A cluster whose API server does not answer is one line on stderr; the others are
    still shown, and the exit status is then 3.
    """
    from fleetmedic.controller.status import render_status

    if cfg.clusters and kubeconfig:
        raise ConfigError("--kubeconfig names one cluster: add --cluster NAME")
    members = [cfg.cluster(n) for n in cfg.cluster_names()] or [cfg]
    tables: list[tuple[str | None, list[dict[str, Any]]]] = []
    failed = []
    for member in members:
        try:
            tables.append((member.cluster_name, _status_rows(member, kubeconfig)))
        except FleetmedicError as exc:
            if not cfg.clusters:
                raise
            failed.append(member.cluster_name)
            click.echo(f"fleetmedic: error: cluster {member.cluster_name}: {exc}", err=True)
    if as_json:
        rows = [{"cluster": name, **r} if name else r for name, t in tables for r in t]
        click.echo(json.dumps(rows, indent=2))
    else:
        for name, rows in tables:
            shown = [
                r
                for r in rows
                if show_all
                or r["state"] != "healthy"
                or r["slow_network"]
                or r["foreign_signals"]
                or r["doing"]
                or r["incidents"]
                or r.get("unclassified")  # the agent's net caught driver errors
            ]
            if name:
                click.echo(f"== cluster {name} ==")
            click.echo(
                render_status(
                    shown, hidden=len(rows) - len(shown), width=max(80, _terminal_width())
                )
            )
            for line in _incident_groups(rows):
                click.echo(line)
    if failed:
        sys.exit(clikit.EXIT_UNREACHABLE)


def _status_rows(cfg: Config, kubeconfig: str | None) -> list[dict[str, Any]]:
    from fleetmedic.controller.status import STATE_ORDER, node_status
    from fleetmedic.policy.profiles import assign

    at = now()
    from fleetmedic.policy import domainnode, domains

    cluster = connect(cfg, kubeconfig)
    vs = views(cluster, cfg)
    profile_of = assign(vs, cfg).profile_of
    fleet = _gpu_history(cluster, cfg)
    rows = [
        node_status(
            v,
            at,
            profile_of.get(v.name, "(conflict)"),
            _lemon_of(cfg, profile_of.get(v.name)),
            fleet,
        )
        for v in vs
    ]
    for v, r in zip(vs, rows, strict=True):  # the open domain incidents holding each node
        r["incidents"] = [
            domains.name_of(e["key"], e["value"])
            for e in domainnode.open_on_node(v.annotations.get(domainnode.ANN_INCIDENTS))
        ]
    rows.sort(
        key=lambda r: (STATE_ORDER[r["state"]], not r["slow_network"], r["since"] or "", r["name"])
    )
    return rows


def _gpu_history(cluster: Cluster, cfg: Config) -> Any:
    """The store's GPU history, or None (with a warning) when it cannot be read: status
    and history still show what each Node holds."""
    from fleetmedic.controller import gpustore

    try:
        return gpustore.read(cluster, cfg)
    except FleetmedicError as exc:
        click.echo(f"fleetmedic: warning: the GPUs' history in the store: {exc}", err=True)
        return None


def _lemon_of(cfg: Config, profile: str | None) -> Any:
    try:
        return cfg.profile(profile or "default").ladder.lemon
    except ValueError:
        return cfg.ladder.lemon


def _terminal_width() -> int:
    return os.get_terminal_size().columns if sys.stdout.isatty() else 250


# -- plan -----------------------------------------------------------------------------
@click.command(
    "plan", epilog=clikit.epilog("fleetmedic plan", "fleetmedic plan --cluster gpu-east --json")
)
@common
@clikit.json_option()
def plan(cfg: Config, kubeconfig: str | None, as_json: bool) -> None:
    """Show what the next cycle would do, changing nothing: each fenced node's next repair
    action (or why it is held), and with `sweep:` the idle nodes a diagnostic sweep would
    start on, the sweeps under way, and why a pool's sweeps are held."""
    from fleetmedic.controller.switches import Switches, read_switches
    from fleetmedic.policy import breaker as breakermod
    from fleetmedic.policy.actions import Kind
    from fleetmedic.policy.plan import actionable, decide_all, make_plan
    from fleetmedic.policy.profiles import assign

    at = now()
    cluster = connect(cfg, kubeconfig)
    vs = views(cluster, cfg)
    assignment = assign(vs, cfg)
    conflict = assignment.error()
    if conflict:
        raise ConfigError(f"profiles: {conflict}")
    decisions = decide_all(vs, at, cfg, assignment=assignment)
    wanted = actionable(decisions) or bool(cfg.sweeps())
    switches = read_switches(cluster, cfg) if wanted else Switches()
    breaker_reason = {
        name: breakermod.reason(breakermod.resume(switches.breaker_of(name)))
        for name in cfg.profile_names()
    }
    from fleetmedic.policy import domains, handoff

    incidents = _domain_review(cluster, cfg, vs, at)
    p = make_plan(
        vs,
        decisions,
        at,
        cfg,
        paused=switches.paused,
        breaker_reason=breaker_reason,
        assignment=assignment,
        holds={**handoff.holds(vs, cfg), **domains.holds(incidents)},  # (as the loop's)
        count_once=domains.grouped(incidents),
    )
    held = {a.node: why for a, why in p.admission.held}
    admitted = {a.node for a in p.admission.admitted}
    items: list[dict[str, Any]] = []
    for _, a in p.decisions:
        if a.kind == Kind.NONE and a.reason == "healthy":
            continue
        verdict = "do" if a.node in admitted else "held" if a.node in held else a.kind
        items.append(
            {
                "node": a.node,
                "profile": a.profile,
                "action": a.kind,
                "step": a.step,
                "phase": a.phase,
                "reason": a.reason,
                "verdict": verdict,
                "held_because": held.get(a.node),
                "not_before": a.not_before.isoformat() if a.not_before else None,
                "playbook": a.playbook,
            }
        )
    if cfg.sweeps():
        items += _sweep_items(
            cluster, cfg, vs, at, assignment, admitted, switches.paused, breaker_reason
        )
    items += _domain_items(incidents)
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for i in items:
        if i["action"] == "domain":
            click.echo(f"domain {i['domain']}: {i['verdict']}: {i['reason']}")
            continue
        what = i["action"] + (f" {i['phase']}" if i["phase"] else "")
        tail = {"do": "", "held": f"  [held: {i['held_because']}]"}.get(i["verdict"], "")
        if i["verdict"] == "wait" and i["not_before"]:
            tail = f"  [not before {i['not_before']}]"
        if i["node"] is None:  # a pool's sweeps, held as a whole
            click.echo(f"sweeps of profile {i['profile']}: held: {i['held_because']}")
            continue
        click.echo(f"{i['node']}: {what} ({i['step'] or '-'}): {i['reason']}{tail}")
    slots = len(p.fleet.active)
    sweeps = sum(1 for i in items if i["action"] == "sweep" and i["verdict"] == "do")
    if incidents.open:
        click.echo(f"{len(incidents.open)} domain incident(s) open or opening")
    click.echo(
        f"{len(admitted)} action(s) would run now, {len(held)} held; "
        + (f"{sweeps} sweep(s) would start; " if cfg.sweeps() else "")
        + f"{slots} node(s) hold repair slots; {len(vs)} nodes in the pool"
    )


def _sweep_items(
    cluster: Cluster,
    cfg: Config,
    vs: list[NodeView],
    at: datetime,
    assignment: Assignment,
    admitted: set[str],
    paused: str | None,
    breakers: dict[str, str | None],
) -> list[dict[str, Any]]:
    """The sweeps the controller's next cycle would start, those under way (a node under
    the maintenance taint: a controller's sweep, which this command cannot tell from an
    orphan), and each pool whose sweeps are held, in `plan`'s item shape."""
    from fleetmedic.adapters.cluster import pods_of
    from fleetmedic.controller.podwatch import gpu_nodes_now
    from fleetmedic.policy import sweep

    running = sorted(v.name for v in vs if v.maintenance)
    sp = sweep.plan(
        vs,
        at,
        cfg,
        assignment,
        gpu_busy=gpu_nodes_now(pods_of(cluster, "sweeps")),
        sweeping=running,
        skip=admitted,
        paused=paused,
        breakers=breakers,
    )
    by_name = {v.name: v for v in vs}

    def item(
        node: str | None, profile: str, verdict: str, reason: str, held: str | None = None
    ) -> dict[str, Any]:
        sw = cfg.profile(profile).sweep
        return {
            "node": node,
            "profile": profile,
            "action": "sweep",
            "step": None,
            "phase": f"level {sw.level}" if sw else None,
            "reason": reason,
            "verdict": verdict,
            "held_because": held,
            "not_before": None,
            "playbook": "sweep.yml",
        }

    def last(name: str) -> str:
        swept = sweep.LastSweep.of(by_name[name])
        return f"last swept {swept.at} ({swept.result})" if swept else "never swept"

    out = [item(n, prof, "do", f"idle, {last(n)}") for n, prof in sp.start]
    for name in running:
        prof = assignment.profile_of.get(name)
        if prof is not None:
            out.append(item(name, prof, "running", "under the maintenance taint"))
    out += [item(None, prof, "held", "", why) for prof, why in sorted(sp.held.items())]
    return out


# -- domain incidents in the other commands ------------------------------------------
def _with_incidents(rows: list[dict[str, Any]], node: dict[str, Any]) -> list[dict[str, Any]]:
    """``history`` rows with the domain incidents the node was in (its annotation: the
    Events about them expire with the cluster's event TTL), newest first again."""
    from fleetmedic.policy import domainnode

    ann = (node.get("metadata") or {}).get("annotations") or {}
    extra = domainnode.timeline_rows(ann.get(domainnode.ANN_INCIDENTS))
    if not extra:
        return rows
    return sorted([*rows, *extra], key=lambda r: str(r["at"])[:19], reverse=True)


def _incident_groups(rows: list[dict[str, Any]]) -> list[str]:
    """``status``: one line per open domain incident and the nodes it holds."""
    groups: dict[str, list[str]] = {}
    for r in rows:
        for name in r.get("incidents") or ():
            groups.setdefault(name, []).append(f"{r['name']} ({r['state']})")
    return [
        f"domain incident {name}: {len(nodes)} node(s) held: {', '.join(nodes)}"
        for name, nodes in sorted(groups.items())
    ]


def _domain_review(cluster: Cluster, cfg: Config, vs: list[NodeView], at: datetime) -> Any:
    """The domains as the next cycle would see them: the incidents on the record, and
    fences as recent as their state-since stamps say (this command has no memory of
    when each node fenced; a fence without a stamp does not count)."""
    from fleetmedic.controller import domainrecord
    from fleetmedic.model import keys
    from fleetmedic.policy import domains

    if not cfg.domains:
        return domains.NONE
    open_ = domainrecord.read(cluster, cfg).open
    since = {
        v.name: v.annotations.get(keys.ANN_STATE_SINCE) or domains.BEFORE
        for v in vs
        if domains.fenced(v)
    }
    return domains.review(vs, cfg.domains, at, domains.Memory(True, since), open_)


def _domain_items(rev: Any) -> list[dict[str, Any]]:
    """``plan``'s lines for domains: incidents open (and the nodes they hold), those the
    next cycle would open, and domains with recent fences near their threshold."""

    def item(name: str, verdict: str, reason: str) -> dict[str, Any]:
        return {
            "node": None,
            "profile": None,
            "action": "domain",
            "step": None,
            "phase": None,
            "reason": reason,
            "verdict": verdict,
            "held_because": None,
            "not_before": None,
            "playbook": None,
            "domain": name,
        }

    held: dict[str, list[str]] = {}
    for node, names in rev.held.items():
        for name in names:
            held.setdefault(name, []).append(node)
    opening = {i.name for i in rev.opened}
    items = [
        item(
            i.name,
            "would open" if i.name in opening else "open",
            f"{i.why}; holds {len(held.get(i.name, []))} node(s): "
            + ", ".join(sorted(held.get(i.name, []))),
        )
        for i in rev.open
    ]
    items += [
        item(
            n.name,
            "near",
            f"{len(n.fenced)} of {n.size} nodes fenced within the window, threshold "
            f"{n.threshold}: {', '.join(n.fenced)}",
        )
        for n in rev.near
    ]
    return items


# -- history --------------------------------------------------------------------------
@click.command(
    "history",
    epilog=clikit.epilog(
        "fleetmedic history gpu-node-7", "fleetmedic history gpu-node-7 --limit 5 --json"
    ),
)
@common
@click.argument("node", type=clikit.NODE)
@clikit.json_option()
@click.option(
    "--limit", type=click.IntRange(min=0), default=0, help="Only the newest N entries (0: all)."
)
def history(cfg: Config, kubeconfig: str | None, node: str, as_json: bool, limit: int) -> None:
    """A node's whole history, newest first: every repair attempt (its history annotation)
    and every Event about it (fleetmedic's actions, the agent's fences, others')."""
    from fleetmedic.controller.timeline import render, timeline

    cluster = connect(cfg, kubeconfig)
    try:
        obj = cluster.get_node(node)
    except NotFoundError:
        raise NotFoundError(f"node {node} not found") from None
    from fleetmedic.controller import gpustatus
    from fleetmedic.model.nodestate import view as view_of

    v = view_of(obj, cfg.vocabulary(), cfg.foreign())
    fleet = _gpu_history(cluster, cfg)
    rows = timeline(obj, cluster.list_node_events(node))
    rows = _with_incidents(rows, obj)
    rows = sorted(
        [*rows, *gpustatus.history_rows(v, obj, fleet)],
        key=lambda r: str(r["at"])[:19],
        reverse=True,
    )
    if limit > 0:
        rows = rows[:limit]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(render(rows, width=max(80, _terminal_width())))
    for line in gpustatus.gpu_table(v, fleet):
        click.echo(line)
