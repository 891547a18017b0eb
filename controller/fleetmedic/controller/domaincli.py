"""``fleetmedic domain status|release``: domain incidents by hand.

The incidents live on the pause ConfigMap (data key ``domains``, policy/domains.py), as
the breaker's record does. ``release NAME`` marks one closed there (who and when); the
running leader reads the record every few seconds while an incident is open, adopts the
release, and the domain's nodes go to their own ladders. The write is guarded by the
ConfigMap's resourceVersion, so a release and the controller's own writes never lose
each other. Like the other commands by hand, it prints an audit line on stderr.
"""

from __future__ import annotations

import json

import click

from fleetmedic import clikit
from fleetmedic.controller import domainrecord
from fleetmedic.controller.cli import common, connect, now, operator
from fleetmedic.errors import ConflictError, FleetmedicError
from fleetmedic.model.config import Config
from fleetmedic.policy import domains
from fleetmedic.policy.domains import Incident
from fleetmedic.policy.history import stamp

RELEASE_TRIES = 5


@click.group(
    "domain",
    epilog=clikit.epilog(
        "fleetmedic domain status", "fleetmedic domain release nvidia.com/gpu.clique=c-17"
    ),
)
def domain() -> None:
    """Show or release domain incidents.

    When `threshold` nodes of one domain (the nodes sharing a value of a `domains[].key`
    label: an NVLink domain, a rack) fence within `window`, the controller opens one
    incident: their per-node repairs are held and one email goes out. It closes when the
    nodes pass, or here by hand, which hands them back to their own ladders.
    """


def pick(incidents: tuple[Incident, ...], name: str) -> Incident:
    """The open incident ``name`` names: ``key=value``, or the value alone when only one
    open incident has it. FleetmedicError (exit 2) naming the open ones otherwise."""
    open_ = [i for i in incidents if i.open]
    hits = [i for i in open_ if name in (i.name, i.value, i.id)]
    if len(hits) == 1:
        return hits[0]
    known = ", ".join(i.name for i in open_) or "none is open"
    if hits:
        raise FleetmedicError(
            f"{name!r} names {len(hits)} open incidents; give key=value ({known})"
        )
    raise FleetmedicError(f"no open domain incident {name!r} (open: {known})")


@domain.command(
    "status",
    epilog=clikit.epilog("fleetmedic domain status", "fleetmedic domain status --json"),
)
@common
@clikit.json_option("Print JSON: a list of the incidents on the record, open ones first.")
def domain_status(cfg: Config, kubeconfig: str | None, as_json: bool) -> None:
    """List the open domain incidents (and the last closed ones)."""
    incidents = domainrecord.require(connect(cfg, kubeconfig), cfg).incidents
    ordered = sorted(incidents, key=lambda i: (not i.open, i.opened_at))
    if as_json:
        click.echo(json.dumps([{"open": i.open, **i.to_json()} for i in ordered], indent=2))
        return
    if not ordered:
        click.echo("no domain incidents recorded")
        return
    for i in ordered:
        if i.open:
            click.echo(f"OPEN   {i.name} since {i.opened_at}: {i.why}; nodes {', '.join(i.nodes)}")
            if i.play is not None:
                p = i.play
                click.echo(
                    f"       playbook {p.playbook}: {p.status}"
                    + (f" (run {p.run_id})" if p.run_id else "")
                    + (f", {p.outcome}" if p.outcome else "")
                )
        else:
            click.echo(f"closed {i.name} ({i.opened_at} .. {i.closed_at}, {i.closed_by}): {i.why}")


@domain.command(
    "release",
    epilog=clikit.epilog(
        "fleetmedic domain release nvidia.com/gpu.clique=c-17 --dry-run",
        "fleetmedic domain release c-17 --yes",
    ),
)
@common
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Say what it would do; change nothing.")
@clikit.json_option("Print the released incident as JSON.")
def domain_release(
    cfg: Config, kubeconfig: str | None, name: str, yes: bool, dry_run: bool, as_json: bool
) -> None:
    """Close a domain incident by hand: its nodes go back to their own ladders.

    NAME is the domain as `key=value` (e.g. nvidia.com/gpu.clique=c-17), or its value
    alone when that is unambiguous.
    """
    from fleetmedic.controller import audit

    cluster = connect(cfg, kubeconfig)
    by = operator()
    for _ in range(RELEASE_TRIES):
        there = domainrecord.require(cluster, cfg)
        ref, incidents, version = there.ref, there.incidents, there.version
        inc = pick(incidents, name)
        if dry_run:
            click.echo(
                f"dry run: would release domain incident {inc.name} (open since "
                f"{inc.opened_at}; nodes {', '.join(inc.nodes)}); nothing changed"
            )
            return
        if not yes:
            click.confirm(
                f"Release domain incident {inc.name} open since {inc.opened_at}? Its nodes "
                "go back to their own ladders (reboots may start).",
                abort=True,
                err=True,
            )
            yes = True  # (asked once, even if the write is retried)
        done = Incident(
            **{
                **inc.__dict__,
                "closed_at": stamp(now()),
                "closed_by": by,
                "why": "released by hand (fleetmedic domain release)",
            }
        )
        record = [done if i.id == inc.id else i for i in incidents]
        assert ref is not None  # (require: the record exists)
        try:
            cluster.patch_config_map_data(
                *ref, {domains.RECORD_KEY: domains.encode(record)}, version
            )
        except ConflictError:
            continue  # the controller wrote meanwhile: read again
        clikit.audit_on_stderr()
        audit.record(by, inc.name, "domain release", done.why, "written")
        if as_json:
            click.echo(json.dumps(done.to_json(), indent=2))
        else:
            click.echo(
                f"domain incident {inc.name} released by {by}; the controller hands its nodes "
                "back to their ladders within a few seconds"
            )
        return
    raise FleetmedicError(
        f"the record on ConfigMap {cfg.safety.pause_configmap} kept changing; try again"
    )
