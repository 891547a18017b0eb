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
    from fleetmedic.adapters.kube import Kube
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
            ]
            if name:
                click.echo(f"== cluster {name} ==")
            click.echo(
                render_status(
                    shown, hidden=len(rows) - len(shown), width=max(80, _terminal_width())
                )
            )
    if failed:
        sys.exit(clikit.EXIT_UNREACHABLE)


def _status_rows(cfg: Config, kubeconfig: str | None) -> list[dict[str, Any]]:
    from fleetmedic.controller.status import STATE_ORDER, node_status
    from fleetmedic.policy.profiles import assign

    at = now()
    vs = views(connect(cfg, kubeconfig), cfg)
    profile_of = assign(vs, cfg).profile_of
    rows = [node_status(v, at, profile_of.get(v.name, "(conflict)")) for v in vs]
    rows.sort(
        key=lambda r: (STATE_ORDER[r["state"]], not r["slow_network"], r["since"] or "", r["name"])
    )
    return rows


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
    kube = connect(cfg, kubeconfig)
    vs = views(kube, cfg)
    assignment = assign(vs, cfg)
    conflict = assignment.error()
    if conflict:
        raise ConfigError(f"profiles: {conflict}")
    decisions = decide_all(vs, at, cfg, assignment=assignment)
    wanted = actionable(decisions) or bool(cfg.sweeps())
    switches = read_switches(kube, cfg) if wanted else Switches()
    breaker_reason = {
        name: breakermod.reason(breakermod.resume(switches.breaker_of(name)))
        for name in cfg.profile_names()
    }
    p = make_plan(
        vs,
        decisions,
        at,
        cfg,
        paused=switches.paused,
        breaker_reason=breaker_reason,
        assignment=assignment,
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
            kube, cfg, vs, at, assignment, admitted, switches.paused, breaker_reason
        )
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for i in items:
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
    click.echo(
        f"{len(admitted)} action(s) would run now, {len(held)} held; "
        + (f"{sweeps} sweep(s) would start; " if cfg.sweeps() else "")
        + f"{slots} node(s) hold repair slots; {len(vs)} nodes in the pool"
    )


def _sweep_items(
    kube: Kube,
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
    from fleetmedic.controller.podwatch import gpu_nodes_now
    from fleetmedic.policy import sweep

    running = sorted(v.name for v in vs if v.maintenance)
    sp = sweep.plan(
        vs,
        at,
        cfg,
        assignment,
        gpu_busy=gpu_nodes_now(kube),
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

    kube = connect(cfg, kubeconfig)
    try:
        obj = kube.get_node(node)
    except NotFoundError:
        raise NotFoundError(f"node {node} not found") from None
    rows = timeline(obj, kube.list_node_events(node))
    if limit > 0:
        rows = rows[:limit]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(render(rows, width=max(80, _terminal_width())))
