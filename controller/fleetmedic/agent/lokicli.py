"""``fleetmedic watch loki``: detect GPU faults from the cluster's Loki (agent/lokisource.py)."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import click

from fleetmedic import clikit
from fleetmedic.agent.cli import _logging
from fleetmedic.errors import FleetmedicError


@click.group(
    "watch",
    epilog=clikit.epilog(
        "fleetmedic watch loki --endpoint http://localhost:3100",
        "fleetmedic watch loki --endpoint http://loki:3100 --once --lookback 1h",
    ),
)
def watch() -> None:
    """Detect GPU faults from a log store instead of an agent on every node."""


@watch.command(
    "loki",
    epilog=clikit.epilog(
        "fleetmedic watch loki --endpoint http://localhost:3100",
        "fleetmedic watch loki --endpoint http://loki:3100 --once --lookback 1h",
        "fleetmedic watch loki --endpoint http://loki:3100 --mode poll --poll-interval 1s",
    ),
)
@click.option(
    "--endpoint",
    envvar="LOG_ENDPOINT",
    required=True,
    metavar="URL",
    help="Loki's HTTP address, e.g. http://localhost:3100 through `kubectl port-forward` "
    "(env LOG_ENDPOINT, as Konduktor's controller reads it).",
)
@click.option("--tenant", metavar="ID", help="Loki tenant (X-Scope-OrgID) when auth is on.")
@click.option(
    "--cursor-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("/var/lib/fleetmedic/loki-cursor.json"),
    show_default=True,
    help="Where it keeps how far it has read (resumes there after a restart).",
)
@click.option(
    "--cursor-configmap",
    metavar="NAMESPACE/NAME",
    help="Keep the cursor in this ConfigMap instead (key loki-cursor; it must exist): "
    "what a Deployment uses, so a rescheduled pod resumes where the last one stopped.",
)
@click.option(
    "--kernel-query",
    "kernel_queries",
    multiple=True,
    metavar="LOGQL",
    show_default="the journal's kernel lines {transport=\"kernel\"}, Fluent Bit's "
    '{source="kmsg"}, a dmesg DaemonSet',
    help="LogQL selector of node kernel-log streams (repeatable).",
)
@click.option(
    "--pod-query",
    "pod_queries",
    multiple=True,
    metavar="LOGQL",
    show_default="every namespace",
    help="LogQL selector of pod-log streams (repeatable).",
)
@click.option(
    "--node-label",
    "node_labels",
    multiple=True,
    metavar="LABEL",
    show_default="node_name, host, k8s_node_name, nodename, hostname, node",
    help="Stream label naming the node (repeatable).",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    default=None,
    show_default="the Pod's ServiceAccount in a cluster, else $KUBECONFIG or ~/.kube/config",
    help="Kubeconfig to use (the cluster whose Nodes it fences).",
)
@click.option(
    "--slurm-conf",
    type=click.Path(dir_okay=False),
    default=None,
    help="The nodes are Slurm nodes: fence them through scontrol with this slurm.conf (a "
    "drain with our reason, the record in Extra) instead of the Kubernetes API. The cursor "
    "is then a file (--cursor-file).",
)
@click.option(
    "--slurm-reason-prefix",
    default="fleetmedic:",
    show_default=True,
    metavar="PREFIX",
    help="With --slurm-conf: the drain reason prefix we own (must match the controller's).",
)
@click.option(
    "--taints",
    default="default",
    show_default=True,
    help="Taint name preset, default or ossci: must match the controller's.",
)
@click.option(
    "--mode",
    type=click.Choice(["tail", "poll"]),
    default="tail",
    show_default=True,
    help="tail: follow Loki's websocket tail (/loki/api/v1/tail) for new lines, catching "
    "up with query_range from the cursor after each reconnect (falls back to polling "
    "where the tail is refused, e.g. a proxy without websockets); poll: query_range every "
    "--poll-interval.",
)
@click.option(
    "--poll-interval",
    type=clikit.DURATION,
    default="2s",
    help="Time between two reads of every query when polling (--mode poll, or the "
    "tail's fallback).",
)
@click.option(
    "--lookback",
    type=clikit.DURATION,
    default="1h",
    help="How far back to read on the first start (no cursor yet).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    metavar="PORT",
    help="Serve Prometheus metrics (fleetmedic_loki_up, lines, findings) here; 0: off.",
)
@click.option(
    "--agent-config",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The agents' config file (fleetmedic agent --config): its kernel.thresholds, "
    "which count monitor findings (e.g. NCCL IB errors) toward a fence, apply here too; "
    "none ship by default.",
)
@click.option("--once", is_flag=True, help="One round over every query, then exit.")
@clikit.log_level_option
def loki(
    endpoint: str,
    tenant: str | None,
    cursor_file: Path,
    cursor_configmap: str | None,
    kernel_queries: tuple[str, ...],
    pod_queries: tuple[str, ...],
    node_labels: tuple[str, ...],
    kubeconfig: str | None,
    slurm_conf: str | None,
    slurm_reason_prefix: str,
    taints: str,
    mode: str,
    poll_interval: float,
    lookback: float,
    metrics_port: int,
    agent_config: Path | None,
    once: bool,
    log_level: str,
) -> None:
    """Follow node kernel logs and pod logs in Loki; fence nodes as the agent does.

    By default it follows Loki's websocket tail, and reads with query_range from its
    cursor on start and after every reconnect, so no line is lost or handled twice;
    --mode poll reads with query_range only. --once is one query_range round.

    Every line goes through the same scanner and catalogs as `fleetmedic agent` (CUDA and
    NCCL lines of pod logs through the workload catalog) and fences through the same
    strikes, annotations and taints; the controller repairs the node the same way.
    It needs to read and patch Nodes (and post Events), nothing else.
    """
    _logging(log_level)
    from prometheus_client import CollectorRegistry, start_http_server

    from fleetmedic import kinds
    from fleetmedic.adapters.cluster import Store
    from fleetmedic.agent.config import AgentConfig
    from fleetmedic.agent.lokicursor import ConfigMapCursor, CursorStore, FileCursor
    from fleetmedic.agent.lokisource import (
        LokiMetrics,
        LokiSource,
        LokiSourceConfig,
        node_writers,
    )
    from fleetmedic.model.vocabulary import preset

    try:
        # every check that needs no server first, so a typo never waits on one
        check_endpoint(endpoint)
        namespace, _, name = (cursor_configmap or "").partition("/")
        if cursor_configmap and not (namespace and name):
            raise ValueError(f"--cursor-configmap wants NAMESPACE/NAME, got {cursor_configmap!r}")
        vocab = preset(taints)
        # the flags as the agent's settings: the nodes' kind picks where they are written
        side = AgentConfig.of_flags(
            kubeconfig=kubeconfig, slurm_conf=slurm_conf, slurm_reason_prefix=slurm_reason_prefix
        )
        kube = kinds.node_docs(side, vocab, one_node=False, lasting=not once)()
        store: CursorStore
        if cursor_configmap:
            if not isinstance(kube, Store):
                raise ValueError(f"--cursor-configmap: {kinds.where(kube)} has no ConfigMaps")
            store = ConfigMapCursor(kube, namespace, name)
        else:
            check_creatable(cursor_file.parent)
            store = MadeOnSave(FileCursor(cursor_file))
        cfg = LokiSourceConfig(
            endpoint=endpoint,
            kernel_queries=kernel_queries,
            pod_queries=pod_queries,
            node_labels=node_labels,
            tenant=tenant,
            mode=mode,
            poll_interval=poll_interval,
            lookback=lookback,
            thresholds=AgentConfig.from_file(agent_config).kernel.thresholds
            if agent_config
            else {},
        )
        registry = CollectorRegistry()
        source = LokiSource(
            cfg,
            node_writers(kube, vocab),
            store,
            metrics=LokiMetrics(registry),
        )
        if metrics_port and not once:
            start_http_server(metrics_port, registry=registry)
        if once:
            handled = source.poll()
            click.echo(
                json.dumps(
                    {
                        "lines": handled,
                        "fenced": source.fenced,
                        "counted": source.counted,
                        "unattributed": source.unattributed,
                    }
                )
            )
            return
    except FleetmedicError as exc:
        clikit.fail(exc, clikit.exit_code_of(exc), "fleetmedic watch loki")
    except (OSError, ValueError) as exc:
        clikit.fail(exc, clikit.EXIT_USAGE, "fleetmedic watch loki")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    source.run(stop)


def check_endpoint(endpoint: str) -> None:
    """Loki's address must be an http(s) URL with a host (checked before any connection)."""
    from urllib.parse import urlsplit

    try:
        url = urlsplit(endpoint)
    except ValueError as exc:  # (a malformed IPv6 host; nothing of the URL is echoed)
        raise ValueError(f"--endpoint is not a URL: {exc}") from None
    # never echo a password or token written into the URL (user:secret@host)
    shown = (
        url._replace(netloc=url.netloc.rpartition("@")[2]).geturl()
        if "@" in url.netloc
        else endpoint
    )
    try:
        url.port  # noqa: B018 (raises ValueError on a port out of range or not a number)
    except ValueError as exc:
        raise ValueError(f"--endpoint {shown!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(
            f"--endpoint wants Loki's http(s):// address (e.g. http://localhost:3100), "
            f"got {shown!r}"
        )


def check_creatable(directory: Path) -> None:
    """``directory`` exists, or could be made: its nearest existing ancestor is a directory
    we may write. Checked at start, made only at the first save (``MadeOnSave``), so a
    run that fails first leaves no directory behind (as root, under /var/lib)."""
    up = clikit.uncreatable(directory)
    if up is not None:
        raise ValueError(f"--cursor-file: cannot create {directory} ({up} is not writable)")


class MadeOnSave:
    """A FileCursor whose directory is made when it first saves."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def load(self) -> Any:
        return self.inner.load()

    def save(self, cursor: Any) -> None:
        self.inner.path.parent.mkdir(parents=True, exist_ok=True)
        self.inner.save(cursor)

    def __str__(self) -> str:
        return str(self.inner)
