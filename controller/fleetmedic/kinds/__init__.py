"""Cluster kinds: one module each (kinds/kubernetes.py, kinds/slurm.py), and the only
modules that import a kind's concrete adapters (import-linter's "only kinds/ picks a
cluster" contract, tests/unit/test_kinds_seam.py).

A kind owns, behind :class:`Kind`:

- ``connect``: the controller's :class:`~fleetmedic.adapters.cluster.Cluster` (with the
  verbs that differ by kind: drain, settle, reboot; and its capabilities: pods);
- ``node_docs``: where a node-side process writes (the agent, ``fleetmedic watch loki``);
- ``preflight``: what it must find before the first repair (files, run directories);
- ``prepare``: its start-up preparation (Slurm: the store checked, the pause ConfigMap
  made, the controller claims on slurmctld read: kinds/slurmha.py), and the Leadership
  options its loop runs with.

The rest of the package asks this module by the config's ``kind`` (``for_config``) or
the agent's settings (``node_docs``), and never names a kind. A third kind is a module
here, its adapters in adapters/, its config section in model/config/, and one line in
:data:`KINDS` (docs/architecture.md, "Adding a cluster kind").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.adapters.nodedocs import NodeDocs
from fleetmedic.errors import ConfigError
from fleetmedic.kinds import kubernetes, slurm
from fleetmedic.model.config import Config


class NodeSide(Protocol):
    """What a node-side process's settings say about where its nodes live (the agent's
    AgentConfig; ``watch loki`` builds one from its flags)."""

    @property
    def node_name(self) -> str: ...

    @property
    def kubeconfig(self) -> str | None: ...

    @property
    def slurm(self) -> Any: ...  # the agent's `slurm:` section, or None


class Kind(Protocol):
    name: str  # the config's `kind:`
    server_title: str  # what a message calls its server ("API server")

    def connect(self, cfg: Config, kubeconfig: str | None) -> Cluster:
        """The cluster ``cfg`` serves (``kubeconfig``: the --kubeconfig flag, if given)."""
        ...

    def node_docs(
        self, side: NodeSide, vocab: Any, named_by: str, one_node: bool, lasting: bool
    ) -> Callable[[], NodeDocs]:
        """Where a node-side process writes: each call a writer for one of its threads
        (``one_node``: the agent's own node, whose name is checked first; ``lasting``:
        a daemon, not a ``--once`` run, so a reader that pays its start once may be used)."""
        ...

    def preflight(self, cfg: Config) -> tuple[list[str], list[Path]]:
        """(problems, one line each; directories the kind needs made at start)."""
        ...

    def prepare(self, cluster: Cluster, cfg: Config, identity: str) -> dict[str, Any]:
        """Start-up preparation before the loop (not in a dry run); returns the options of
        the loop's Leadership (controller/leadership.py: ``observe_leases``,
        ``leader_guard``), ``identity`` being the one it leads as."""
        ...

    def claims(self, side: NodeSide) -> bool:
        """The node-side settings name this kind (its section is set)."""
        ...

    def answers(self, docs: NodeDocs) -> bool:
        """``docs`` is this kind's (for messages naming the server)."""
        ...


KINDS: dict[str, Kind] = {k.name: k for k in (kubernetes.KIND, slurm.KIND)}
NODE_SIDE_DEFAULT: Kind = kubernetes.KIND
"""The kind of a node-side process whose settings name none (the agent's default)."""


def for_config(cfg: Config) -> Kind:
    try:
        return KINDS[cfg.kind]
    except KeyError:
        raise ConfigError(f"kind: {cfg.kind!r} is not one of {', '.join(KINDS)}") from None


def connect(cfg: Config, kubeconfig: str | None = None) -> Cluster:
    """The cluster ``cfg`` serves, through its kind."""
    return for_config(cfg).connect(cfg, kubeconfig)


def for_node_side(side: NodeSide) -> Kind:
    """The kind a node-side process's settings name, else :data:`NODE_SIDE_DEFAULT`."""
    return next((k for k in KINDS.values() if k.claims(side)), NODE_SIDE_DEFAULT)


def node_docs(
    side: NodeSide,
    vocab: Any,
    named_by: str = "--kubeconfig",
    one_node: bool = True,
    lasting: bool = True,
) -> Callable[[], NodeDocs]:
    return for_node_side(side).node_docs(side, vocab, named_by, one_node, lasting)


def where(docs: NodeDocs) -> str:
    """The server ``docs`` talks to, for a message ("API server https://...")."""
    title = next((k.server_title for k in KINDS.values() if k.answers(docs)), "")
    return f"{title} {docs.server}".strip()
