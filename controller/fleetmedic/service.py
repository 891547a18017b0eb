"""``fleetmedic run``: the controller, with the detectors it runs beside its loop; and
``fleetmedic config check``: everything ``run`` checks at start-up, and nothing more.

The controller and the agent are sibling packages that never import each other, so the
service that puts the Loki source (agent/lokisource.py) next to the controller's loop
(controller/loop.py) is composed here, one layer above both.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import click

from fleetmedic import clikit
from fleetmedic.controller.cli import all_clusters, common
from fleetmedic.controller.daemon import preflight_problems, serve
from fleetmedic.errors import ConfigError, FleetmedicError
from fleetmedic.model.config import Config


@click.command(
    "run",
    epilog=clikit.epilog(
        "fleetmedic run --config /etc/fleetmedic/controller.yaml",
        "fleetmedic run --once --dry-run --log-level debug",
    ),
)
@common
@click.option("--once", is_flag=True, help="Act until nothing more can be done now, then exit.")
@click.option(
    "--once-timeout",
    type=clikit.DURATION,
    default="30s",
    help="With --once: how long to wait for the API server before giving up (exit 3).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Decide and log, change nothing (the start-up checks still run).",
)
@clikit.log_level_option
@all_clusters
def run(
    cfg: Config,
    kubeconfig: str | None,
    once: bool,
    once_timeout: float,
    dry_run: bool,
    log_level: str,
) -> None:
    """Run the remediation controller.

    With `sources.loki` configured it also follows the cluster's Loki for GPU faults (as
    `fleetmedic watch loki` does), only while it leads; `--once` runs no source. With
    `clusters:` it serves every cluster named there, each with its own loop.
    """
    members = [cfg.cluster(n) for n in cfg.cluster_names()] or [cfg]
    endpoints = {  # (resolved now: a missing endpoint is a one-line error at start)
        m.cluster_name: loki_endpoint(m) for m in members if m.sources.loki and not once
    }
    serve(
        cfg,
        kubeconfig,
        once,
        dry_run,
        log_level,
        once_timeout,
        sidecars=lambda member, cluster, metrics: loki_sidecars(
            member, endpoints.get(member.cluster_name), cluster, metrics
        ),
    )


def loki_endpoint(cfg: Config, environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """sources.loki.endpoint, else $LOG_ENDPOINT (Konduktor's variable); one-line error."""
    assert cfg.sources.loki is not None
    endpoint = cfg.sources.loki.endpoint or environ.get("LOG_ENDPOINT", "")
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigError(
            "sources.loki: no endpoint (set sources.loki.endpoint or LOG_ENDPOINT to Loki's "
            f"http(s):// address){f', got {endpoint!r}' if endpoint else ''}"
        )
    return endpoint


def loki_sidecars(cfg: Config, endpoint: str | None, cluster, metrics) -> Sequence:
    if cfg.sources.loki is None or endpoint is None:
        return ()
    from fleetmedic.agent import lokisource as ls
    from fleetmedic.controller.switches import pause_configmap

    loki = cfg.sources.loki
    store: ls.CursorStore
    if loki.cursor_file is not None:
        Path(loki.cursor_file).parent.mkdir(parents=True, exist_ok=True)
        store = ls.FileCursor(Path(loki.cursor_file))
    else:
        ref = pause_configmap(cfg)
        if ref is None:
            raise ConfigError(
                "sources.loki: the cursor lives on safety.pause_configmap, which is empty; "
                "set sources.loki.cursor_file"
            )
        store = ls.ConfigMapCursor(cluster, *ref)
    source = ls.LokiSource(
        ls.LokiSourceConfig(
            endpoint=endpoint,
            kernel_queries=loki.kernel_queries,
            pod_queries=loki.pod_queries,
            node_labels=loki.node_labels,
            tenant=loki.tenant,
            mode=loki.mode,
            poll_interval=loki.poll_interval,
            lookback=loki.lookback,
        ),
        ls.node_writers(cluster, cfg.vocabulary()),
        store,
        metrics=ls.LokiMetrics(metrics.registry),
    )
    return (source.run,)


@click.group(
    "config",
    epilog=clikit.epilog(
        "fleetmedic config check", "fleetmedic config check --config ./controller.yaml"
    ),
)
def config() -> None:
    """Check a controller config before it is used."""


@config.command(
    "check",
    epilog=clikit.epilog(
        "fleetmedic config check",
        "fleetmedic config check --config ./controller.yaml --cluster gpu-east",
        codes=(0, 2),
    ),
)
@common
@all_clusters
def config_check(cfg: Config, kubeconfig: str | None) -> None:
    """Validate everything `run` checks at start-up, touching neither the cluster nor
    the nodes: the config itself (keys, types, selectors, profiles, clusters), then for
    every cluster the files it names (the playbook of every rung, the SSH key, the
    kubeconfig, BMC files, systemd credentials), secrets that must be readable, a
    signing key others can read, the run directories, and the Loki endpoint.

    Prints "ok", or every problem on a line of its own (exit 2).
    """
    members = [cfg.cluster(n) for n in cfg.cluster_names()] or [cfg]
    problems: list[str] = []
    if kubeconfig is not None:
        try:
            clikit.require_kubeconfig(kubeconfig, "--kubeconfig")
        except ConfigError as exc:
            problems.append(str(exc))
    for member in members:
        where = f"cluster {member.cluster_name}: " if member.cluster_name else ""
        found = preflight_problems(member, create=False)
        if member.sources.loki:
            try:
                loki_endpoint(member)
            except FleetmedicError as exc:
                found.append(str(exc))
        problems += [where + p for p in found]
    if not problems:
        click.echo("ok")
        return
    for p in dict.fromkeys(problems):
        click.echo(f"fleetmedic: error: {p}", err=True)
    raise SystemExit(clikit.EXIT_USAGE)
