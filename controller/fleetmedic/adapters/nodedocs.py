"""The node-document interface the agent writes through, on any kind of cluster.

The agent's policy (strikes, the fence rung, fences only go up, the Xid workflows and
counts, the watermark) is written once, as edits of a Kubernetes-shaped Node dict
(:mod:`fleetmedic.model.nodeedit`, :mod:`fleetmedic.agent.annotations`). Where those edits
land is this protocol: :class:`fleetmedic.adapters.kube.Kube` writes the Node itself;
:class:`fleetmedic.adapters.slurmdoc.SlurmNodeDocs` maps the fleetmedic parts of the dict
onto a Slurm node (a drain with our reason, the record in Extra).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class NodeDocs(Protocol):
    server: str
    """Where the nodes live, for messages (the API server's URL, slurmctld's SLURM_CONF)."""

    def get_node(self, name: str) -> dict:
        """The node as a Kubernetes-shaped dict (``metadata``, ``spec.taints``)."""
        ...

    def update_node(self, name: str, mutate: Callable[[dict], bool | None]) -> dict:
        """Read the node, let ``mutate`` edit a copy in place (False: no write), write the
        difference; returns the node as written."""
        ...

    def post_event(
        self,
        node: dict,
        reason: str,
        message: str,
        type: str = "Normal",
        component: str = "fleetmedic",
    ) -> None:
        """Best effort: never raises."""
        ...
