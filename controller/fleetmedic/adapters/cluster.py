"""The cluster interface the controller's loop is written against, on any kind of cluster.

The loop, its policy and its executor are shared; what a kind of cluster does differently
sits behind this protocol, and each kind is one module of fleetmedic/kinds/ that makes
its Cluster (kinds/kubernetes.py: the Nodes, Leases, ConfigMaps and Events of one API
server; kinds/slurm.py: Slurm nodes as node documents, our drain is the repair taint, the
record in Extra is the annotations, Leases and ConfigMaps in a store of the controller's
own).

It is the calls the loop makes, grouped by what they serve. It is wider than "read nodes,
fence, unfence, record" because the loop's other parts (leader election, the pause
switch, the breaker's memory, Events) reach the cluster too; fence, unfence and record are
all one call here, :meth:`Cluster.update_node`, which writes the difference of an edited
node document (on Slurm: one ``scontrol update``). The verbs that really differ by kind
are :meth:`Cluster.drain`, :meth:`Cluster.reboot` and :meth:`Cluster.settle`.

Pods are a capability only Kubernetes has (:class:`Pods`, :attr:`Cluster.pods`): the
sweeps and the GPU operator's hand-off need them, and the config refuses both on a kind
without them (model/config: ``kind: slurm``), so :func:`pods_of` is asked once, when the
loop is put together.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

from fleetmedic.adapters.nodedocs import NodeDocs
from fleetmedic.errors import ConfigError
from fleetmedic.model.config.safety import DrainConfig
from fleetmedic.model.nodestate import NodeView


@runtime_checkable
class Store(Protocol):
    """Leases and ConfigMaps: the API server's, or a file store (adapters/filestore.py)."""

    def get_lease(self, namespace: str, name: str) -> dict: ...

    def create_lease(self, namespace: str, body: dict) -> dict: ...

    def replace_lease(self, namespace: str, body: dict) -> dict: ...

    def get_config_map(self, namespace: str, name: str) -> dict | None: ...

    def patch_config_map_data(
        self,
        namespace: str,
        name: str,
        data: dict[str, str | None],
        resource_version: str | None = None,
    ) -> dict: ...


class Pods(Protocol):
    """What runs on a node, as pods: the Kubernetes drain, sweeps' idle test and the GPU
    operator's hand-off. Only the Kubernetes kind has it."""

    def list_pods_on_node(self, node_name: str) -> tuple[list[dict], str]: ...

    def watch_pods_on_node(
        self, node_name: str, resource_version: str, timeout: int
    ) -> Iterator[tuple[str, dict]]: ...

    def list_pod_pages(
        self, field_selector: str, page_size: int = ...
    ) -> Iterator[tuple[list[dict], str]]: ...

    def watch_pods(
        self, field_selector: str, resource_version: str, timeout: int = 300
    ) -> Iterator[tuple[str, dict]]: ...

    def evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None: ...

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None: ...


@dataclasses.dataclass(frozen=True)
class Done:
    """How a verb ended: the executor's outcome status (``ok``, ``blocked``, ``forbidden``,
    ``failed``, ``timeout``, ...), one line for the node's history, the step that failed."""

    status: str
    message: str = ""
    task: str = ""


class Cluster(NodeDocs, Store, Protocol):
    # -- nodes: read and watch ------------------------------------------------------
    def list_nodes(self, label_selector: str | None = None) -> tuple[list[dict], str]: ...

    def list_node_pages(
        self, label_selector: str | None = None, page_size: int = ...
    ) -> Iterator[tuple[list[dict], str]]: ...

    def watch_nodes(
        self, resource_version: str, timeout: int = 300, label_selector: str | None = None
    ) -> Iterator[tuple[str, dict]]: ...

    # -- nodes: write ---------------------------------------------------------------
    def update_node(self, name: str, mutate: Callable[[dict], bool | None]) -> dict: ...

    def set_node_condition(self, name: str, condition: dict) -> dict: ...

    def delete_node(self, name: str, uid: str) -> bool: ...

    def list_node_events(self, name: str) -> list[dict]: ...

    # -- the verbs that differ by kind ----------------------------------------------
    def drain(
        self,
        node: str,
        settings: DrainConfig,
        *,
        timeout: float | None,
        force: bool,
        gpu_only: bool,
        cancel: threading.Event,
    ) -> Done:
        """Move the node's work off it (Kubernetes: cordon and evict its pods, PDB-aware;
        Slurm: requeue its jobs). ``blocked`` when something still runs at ``timeout``;
        Cancelled (errors.py) when ``cancel`` is set before it could finish."""
        ...

    def settle(self, view: NodeView, cancel: threading.Event) -> float:
        """Before a disruptive phase: wait until the record that says it began is durable
        (Slurm: slurmctld's save window); returns when that record was written (epoch
        seconds). Cancelled when ``cancel`` is set meanwhile."""
        ...

    def reboot(
        self,
        view: NodeView,
        *,
        via: str,
        why: str,
        timeout: float,
        requested_at: float,
        cancel: threading.Event,
    ) -> Done | None:
        """Reboot the node this kind's own way when ``via`` (``ladder.reboot_via``) names
        one (Slurm: ``scontrol reboot``), waiting for the new boot within ``timeout``; None:
        the reboot playbook does it (over SSH, as on every kind)."""
        ...

    # -- capabilities ----------------------------------------------------------------
    @property
    def pods(self) -> Pods | None:
        """The pod calls, on a kind that has pods; None elsewhere."""
        ...


def pods_of(cluster: Cluster, needed_by: str) -> Pods:
    """The cluster's pods, or ConfigError naming what needs them (asked once, when the loop
    is put together; the config refuses these features on a kind without pods)."""
    pods = cluster.pods
    if pods is None:
        raise ConfigError(f"{needed_by} needs pods, which this kind of cluster does not have")
    return pods
