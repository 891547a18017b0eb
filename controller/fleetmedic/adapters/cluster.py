"""The cluster interface the controller's loop is written against, on any kind of cluster.

The loop, its policy and its executor are shared; what a kind of cluster does differently
sits behind this protocol: :class:`fleetmedic.adapters.kube.Kube` (Nodes, Pods, Leases,
ConfigMaps and Events of one API server) and :class:`fleetmedic.adapters.slurmcluster.
SlurmCluster` (Slurm nodes as node documents: our drain is the repair taint, the record in
Extra is the annotations; Leases and ConfigMaps in a store of the controller's own).

It is the calls the loop makes, grouped by what they serve. It is wider than "read nodes,
fence, unfence, record, drain" because the loop's other parts (leader election, the pause
switch, the breaker's memory, Events) reach the cluster too; fence, unfence and record are
all one call here, :meth:`Cluster.update_node`, which writes the difference of an edited
node document (on Slurm: one ``scontrol update``). The pod calls serve the Kubernetes drain
and sweeps; on Slurm the drain waits for jobs instead (controller/slurmdrain.py) and sweeps
are refused by the config, so there they list nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from fleetmedic.adapters.nodedocs import NodeDocs


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

    # -- what runs on a node (the Kubernetes drain, sweeps) --------------------------
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
