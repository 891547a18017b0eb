"""What a human does by hand: ``release``, ``quarantine``, ``reset`` and ``breaker``.

- ``release NODE``: a human returns a ``manual`` node to service (``--force`` for a node
  the controller is still working on).
- ``quarantine NODE [--dry-run]``: deep diagnostics and a recommendation before the node
  returns to service (a node in service is fenced at its ladder's first rung for it).
- ``reset [--yes]``: remove every fleetmedic taint (exact key, value and effect: only
  ours), our records and our own cordons, from every node.
- ``breaker status [--json]`` / ``breaker reset [--yes]``: the circuit breaker as recorded
  on the pause ConfigMap; a reset lets the running controller resume.

Release, quarantine and reset write a Node the same way: through
:func:`~fleetmedic.controller.recorder.write_by_hand` (the write, its Events, the
NodeCondition and the audit line, which is printed on stderr as well).
"""

from __future__ import annotations

import dataclasses
import json

import click

from fleetmedic import clikit
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller.cli import common, connect, now, operator, views
from fleetmedic.errors import ConfigError, FleetmedicError, NotFoundError
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.nodestate import view as view_of


# -- release and reset ----------------------------------------------------------------
@click.command(
    "release",
    epilog=clikit.epilog("fleetmedic release gpu-node-7", "fleetmedic release gpu-node-7 --force"),
)
@common
@click.argument("node", type=clikit.NODE)
@click.option("--force", is_flag=True, help="Also release a node still in reboot or reimage.")
def release(cfg: Config, kubeconfig: str | None, node: str, force: bool) -> None:
    """Return a node in manual repair to service."""
    from fleetmedic.policy import release as releasemod

    cluster = connect(cfg, kubeconfig)
    try:
        v = view_of(cluster.get_node(node), cfg.vocabulary(), cfg.foreign())
    except NotFoundError:
        raise NotFoundError(f"node {node} not found") from None
    if v.state == "healthy":
        raise FleetmedicError(f"node {node} is not in repair (no fleetmedic repair taint)")
    held = keys.ANN_HOLD in v.annotations  # (stopped for a human: nothing under way)
    if v.state != "manual" and not force and not held:
        raise FleetmedicError(
            f"node {node} is in {v.state}, which the controller is still "
            "working on; use --force to release it anyway"
        )
    from fleetmedic.controller.recorder import write_by_hand

    clikit.audit_on_stderr()
    upd = releasemod.release(v, now(), cfg, by=operator())
    after = write_by_hand(
        cluster,
        upd,
        cfg.vocabulary(),
        cfg.foreign(),
        by=operator(),
        what="release",
        why=f"{v.state} -> healthy by hand",
    )
    click.echo(f"{node}: {v.state} -> healthy (released by {operator()})")
    _answer_nvsentinel(cfg, cluster, after)
    from fleetmedic.adapters import chat
    from fleetmedic.controller.chatter import deliver_now

    back = chat.repaired(node, f"released by {operator()} ({v.state} -> healthy)")
    for line in deliver_now(cfg, v, back):
        click.echo(f"fleetmedic: warning: {line}", err=True)


def _answer_nvsentinel(cfg: Config, cluster: Cluster, after: NodeView) -> None:
    """A node NVSentinel handed over: its ExternalRemediationRequest is completed now (the
    controller would on its next pass; a failure here only says so)."""
    from fleetmedic.controller.handoff import answer_now

    try:
        said = answer_now(cfg, cluster, after, now())
    except FleetmedicError as exc:
        click.echo(
            f"fleetmedic: warning: NVSentinel's request not completed yet ({exc}); "
            "the running controller completes it",
            err=True,
        )
        return
    if said:
        click.echo(f"nvsentinel: {said}")


@click.command(
    "quarantine",
    epilog=clikit.epilog(
        "fleetmedic quarantine gpu-node-7 --dry-run", "fleetmedic quarantine gpu-node-7"
    ),
)
@common
@click.argument("node", type=clikit.NODE)
@click.option("--dry-run", is_flag=True, help="Say what it would do; change nothing.")
def quarantine(cfg: Config, kubeconfig: str | None, node: str, dry_run: bool) -> None:
    """Run deep diagnostics on a node before it returns to service (the quarantine rung).

    The controller runs `ladder.quarantine.playbook` (level `ladder.quarantine.level`
    diagnostics and the fabric checks) when the node's repair passes, and records its
    recommendation (return-to-service or replace) in the fleetmedic.io/quarantine
    annotation. A node in service is fenced at its ladder's first rung first.
    """
    from fleetmedic.policy import quarantine as qmod
    from fleetmedic.policy.history import stamp
    from fleetmedic.policy.profiles import assign

    cluster = connect(cfg, kubeconfig)
    try:
        v = view_of(cluster.get_node(node), cfg.vocabulary(), cfg.foreign())
    except NotFoundError:
        raise NotFoundError(f"node {node} not found") from None
    profile = assign([v], cfg).profile_of.get(v.name)
    if profile is None:
        raise FleetmedicError(f"node {node} matches no single profile: see `fleetmedic status`")
    by = operator()
    try:
        upd, what = qmod.ask(v, cfg.profile(profile), by, stamp(now()))
    except ValueError as exc:
        raise FleetmedicError(f"node {node} cannot be quarantined: {exc}") from None
    if dry_run:
        click.echo(f"{node}: would ask for a quarantine ({what}); nothing changed")
        return
    from fleetmedic.controller.recorder import write_by_hand

    clikit.audit_on_stderr()
    write_by_hand(cluster, upd, cfg.vocabulary(), cfg.foreign(), by=by, what="quarantine", why=what)
    click.echo(f"{node}: quarantine requested by {by} ({what})")


@click.command(
    "reset", epilog=clikit.epilog("fleetmedic reset", "fleetmedic reset --cluster gpu-east --yes")
)
@common
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(cfg: Config, kubeconfig: str | None, yes: bool) -> None:
    """Remove every fleetmedic taint (only ours)."""
    from fleetmedic.policy import release as releasemod

    cluster = connect(cfg, kubeconfig)
    vocab = cfg.vocabulary()
    ours = (keys.ANN_IN_FLIGHT, keys.ANN_ESCALATED, keys.ANN_CORDONED, keys.ANN_QUARANTINE_REQUEST)
    todo = [
        v
        for v in views(cluster, cfg)
        if any(vocab.is_ours(t) for t in v.taints) or any(k in v.annotations for k in ours)
    ]
    if not todo:
        click.echo("no node carries a fleetmedic taint")
        return
    names = ", ".join(v.name for v in todo[:10]) + (" ..." if len(todo) > 10 else "")
    if not yes:
        click.confirm(
            f"Remove fleetmedic taints from {len(todo)} node(s) ({names})?", abort=True, err=True
        )
    from fleetmedic.controller.recorder import write_by_hand

    clikit.audit_on_stderr()
    by = operator()
    for v in todo:
        upd = releasemod.reset(v, now(), cfg, by=by)
        write_by_hand(
            cluster,
            upd,
            vocab,
            cfg.foreign(),
            by=by,
            what="reset",
            why="every fleetmedic taint removed by hand",
        )
    click.echo(f"removed fleetmedic taints from {len(todo)} node(s): {names}")


# -- breaker --------------------------------------------------------------------------
@click.group(
    "breaker",
    epilog=clikit.epilog("fleetmedic breaker status", "fleetmedic breaker reset --profile b200"),
)
def breaker() -> None:
    """Show or reset the circuit breaker.

    When more than safety.breaker.threshold_percent of the pool turns unhealthy within
    safety.breaker.window, the controller stops every repair and sends one storm email.
    It records the trip on the pause ConfigMap (safety.pause_configmap), so the breaker
    stays open across restarts and leader changes until it is reset here (or its
    cooldown passes). After a reset the storm's nodes are not replayed as new turns.
    """


def _breaker_data(cfg: Config, cluster) -> tuple[tuple[str, str], dict[str, str]]:
    from fleetmedic.controller.switches import pause_configmap

    ref = pause_configmap(cfg)
    if ref is None:
        raise ConfigError(
            "safety.pause_configmap is empty, so the breaker lives only in the "
            "controller's memory (restart the controller to reset it)"
        )
    cm = cluster.get_config_map(*ref)
    if cm is None:
        raise NotFoundError(
            f"ConfigMap {cfg.safety.pause_configmap} not found (ship "
            "deploy/controller/configmap.yaml); without it the breaker lives "
            "only in the controller's memory"
        )
    return ref, cm.get("data") or {}


def _profiles_named(cfg: Config, profile: str | None) -> tuple[str, ...]:
    if profile is None:
        return cfg.profile_names()
    try:
        cfg.profile(profile)
    except ValueError as exc:
        raise ConfigError(f"--profile: {exc}") from None
    return (profile,)


_PROFILE_OPTION = click.option(
    "--profile",
    metavar="NAME",
    default=None,
    show_default="every profile for status, `default` for reset",
    help="The pool profile (profiles[].name in the config) whose breaker to show or reset "
    "(each has its own).",
)


@breaker.command(
    "status",
    epilog=clikit.epilog(
        "fleetmedic breaker status", "fleetmedic breaker status --profile b200 --json"
    ),
)
@common
@_PROFILE_OPTION
@clikit.json_option(
    "Print JSON instead of text (a list, one object per profile, when several are shown)."
)
def breaker_status(cfg: Config, kubeconfig: str | None, profile: str | None, as_json: bool) -> None:
    """Say whether the circuit breaker is open, since when and for which nodes."""
    from fleetmedic.policy import breaker as breakermod

    names = _profiles_named(cfg, profile)
    _, data = _breaker_data(cfg, connect(cfg, kubeconfig))
    records = {n: breakermod.Record.decode(data.get(breakermod.record_key(n))) for n in names}
    if as_json:
        shown = [
            {
                "profile": n,
                "open": bool(r and r.open),
                **(dataclasses.asdict(r) if r else {}),
            }
            for n, r in records.items()
        ]
        click.echo(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2))
        return
    for n, record in records.items():
        whose = "" if n == "default" and len(names) == 1 else f" of profile {n}"
        flag = "" if n == "default" else f" --profile {n}"
        if record is None or not record.open:
            reset = (
                f" (last reset {record.reset_at} by {record.reset_by})"
                if record and record.reset_at
                else ""
            )
            click.echo(f"circuit breaker{whose} closed{reset}")
            continue
        shown_nodes = ", ".join(record.nodes[:10]) + (" ..." if len(record.nodes) > 10 else "")
        click.echo(
            f"circuit breaker{whose} OPEN since {record.tripped_at}: no repair starts until "
            f"`fleetmedic breaker reset{flag}`\n{len(record.nodes)} node(s) turned unhealthy: "
            f"{shown_nodes}"
        )


@breaker.command(
    "reset",
    epilog=clikit.epilog(
        "fleetmedic breaker reset", "fleetmedic breaker reset --profile b200 --yes"
    ),
)
@common
@_PROFILE_OPTION
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def breaker_reset(cfg: Config, kubeconfig: str | None, profile: str | None, yes: bool) -> None:
    """Close a circuit breaker: the controller resumes that profile's repairs within seconds."""
    from fleetmedic.policy import breaker as breakermod

    [name] = _profiles_named(cfg, profile or "default")
    whose = "" if name == "default" else f" of profile {name}"
    cluster = connect(cfg, kubeconfig)
    ref, data = _breaker_data(cfg, cluster)
    key = breakermod.record_key(name)
    record = breakermod.Record.decode(data.get(key))
    if record is None or not record.open:
        click.echo(f"circuit breaker{whose} is closed; nothing to reset")
        return
    if not yes:
        click.confirm(
            f"Reset the circuit breaker{whose} open since {record.tripped_at} "
            f"({len(record.nodes)} node(s))? Repairs resume at once.",
            abort=True,
            err=True,
        )
    by = operator()
    cluster.patch_config_map_data(*ref, {key: breakermod.closed_by(record, now(), by).encode()})
    click.echo(f"circuit breaker{whose} reset by {by}; the controller resumes within a few seconds")
