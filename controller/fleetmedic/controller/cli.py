"""The plumbing every controller command shares: ``--config``, ``--kubeconfig`` and
``--cluster`` (:func:`common`), the config and the cluster it picks, the API client, the
Nodes' views and who is typing.

Every command takes ``--config`` (default /etc/fleetmedic/controller.yaml; when that
default does not exist the built-in defaults apply) and ``--kubeconfig`` (wins over the
config's ``kube.kubeconfig``). Any :class:`~fleetmedic.errors.FleetmedicError` ends the
command with one line, ``fleetmedic: error: ...``, and the exit code of
fleetmedic/clikit.py (2 usage or config, 3 a dependency could not be reached).

Where the commands live:

- controller/daemon.py: the daemon runtime (``serve``, the per-cluster retry loop, the
  start-up preflight); the ``run`` command is fleetmedic/service.py;
- controller/commands.py: what reads only (``status``, ``plan``, ``history``);
- controller/manual.py: what a human does by hand (``release``, ``quarantine``,
  ``reset``, ``breaker``), each write through controller/recorder.py's
  :func:`~fleetmedic.controller.recorder.write_by_hand`.
"""

from __future__ import annotations

import functools
import getpass
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from fleetmedic import clikit
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.errors import ConfigError, FleetmedicError
from fleetmedic.model import config as configmod
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.nodestate import view as view_of

DEFAULT_CONFIG = Path("/etc/fleetmedic/controller.yaml")


# -- plumbing ---------------------------------------------------------------------------
def common(fn: Callable[..., None]) -> Callable[..., None]:
    """--config/--kubeconfig/--cluster, and FleetmedicError as one line with its exit code
    (fleetmedic/clikit.py: 2 usage or config, 3 a dependency unreachable)."""

    @click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        show_default=str(DEFAULT_CONFIG),
        help="Controller config (when the default file is absent: the built-in defaults).",
    )
    @click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False),
        default=None,
        help="kubeconfig file; wins over the config's kube.kubeconfig.",
    )
    @click.option(
        "--cluster",
        metavar="NAME",
        default=None,
        help="With `clusters:` in the config: the cluster to act on"
        + (" (default: every one)." if getattr(fn, "all_clusters", False) else "."),
    )
    @functools.wraps(fn)
    def wrapper(
        config_path: Path | None, kubeconfig: str | None, cluster: str | None, **kwargs: Any
    ) -> None:
        try:
            every = getattr(fn, "all_clusters", False)
            cfg = pick_cluster(load_config(config_path), cluster, every)
            fn(cfg=cfg, kubeconfig=kubeconfig, **kwargs)
        except FleetmedicError as exc:
            clikit.fail(exc, clikit.exit_code_of(exc))

    return wrapper


def all_clusters(fn: Callable[..., None]) -> Callable[..., None]:
    """Mark a command that serves every cluster of `clusters:` when --cluster is not given
    (it gets the whole config); the others get one cluster's effective config."""
    fn.all_clusters = True  # type: ignore[attr-defined]
    return fn


def pick_cluster(cfg: Config, name: str | None, every: bool) -> Config:
    if name:
        if not cfg.clusters:
            raise ConfigError("--cluster: this config serves one cluster (it has no `clusters:`)")
        return cfg.cluster(name)
    if not cfg.clusters or every:
        return cfg
    if len(cfg.clusters) == 1:
        return cfg.cluster(cfg.clusters[0].name)
    raise ConfigError(
        f"this config serves {len(cfg.clusters)} clusters "
        f"({', '.join(cfg.cluster_names())}): name one with --cluster"
    )


def load_config(path: Path | None) -> Config:
    if path is None:
        return configmod.load(DEFAULT_CONFIG) if DEFAULT_CONFIG.exists() else configmod.parse({})
    return configmod.load(path)


def connect(cfg: Config, kubeconfig: str | None) -> Cluster:
    """The cluster ``cfg`` serves, through its kind (fleetmedic/kinds/)."""
    from fleetmedic import kinds

    return kinds.connect(cfg, kubeconfig)


def now() -> datetime:
    return datetime.now(UTC)


def views(cluster, cfg: Config) -> list[NodeView]:
    nodes, _ = cluster.list_nodes(cfg.kube.label_selector)
    return sorted(
        (view_of(n, cfg.vocabulary(), cfg.foreign()) for n in nodes), key=lambda v: v.name
    )


def operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"
