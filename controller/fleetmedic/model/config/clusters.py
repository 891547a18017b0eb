"""The ``clusters:`` section: one controller serving several Kubernetes clusters.

    kube: {label_selector: nvidia.com/gpu.present=true}   # shared by every cluster
    clusters:
      - name: us-east
        kube: {kubeconfig: /etc/fleetmedic/us-east.kubeconfig}
      - name: eu-west
        kube: {kubeconfig: /etc/fleetmedic/eu.kubeconfig, context: gpu}
        safety: {max_concurrent: 1}

Each cluster's sections (any of :data:`OVERRIDABLE`) are deep-merged over the top level
(as profiles are), so each cluster has its own effective config: its own API server,
leader Lease and node Leases (on that API server), budget, circuit breaker, pause
ConfigMap, profiles and BMC settings. The
controller runs one loop per cluster in one process; a cluster whose API server is down
does not hold up the others. Runs and evidence go under ``<run_dir>/<cluster>`` and
``<evidence_dir>/<cluster>``, since two clusters may have nodes of the same name.
Unset: one cluster, the top-level ``kube``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from fleetmedic.model.config.types import Section

OVERRIDABLE = (
    "kind",
    "slurm",
    "kube",
    "ladder",
    "safety",
    "smtp",
    "notify",
    "executor",
    "leader_election",
    "sources",
    "profiles",
    "bmc",
    "nvsentinel",
)
"""Top-level sections a cluster may override (metrics, taints and Ansible are the
controller's own: one endpoint, one vocabulary, one set of playbooks)."""


class ClusterConfig(Section):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
    """Shown in logs, `fleetmedic status`, the `cluster` metric label and `--cluster`;
    lowercase letters, digits and dashes (at most 40)."""
    kind: Literal["kubernetes", "slurm"] | None = None
    """Unset: the top level's `kind`. A `slurm` cluster needs no `kube` (see slurm.py)."""
    slurm: dict[str, Any] | None = None
    """Merged over the top-level `slurm`: this Slurm cluster's slurm.conf, partitions."""
    kube: dict[str, Any] | None = None
    """Merged over the top-level `kube`: at least this cluster's kubeconfig or context
    (required for a Kubernetes cluster)."""
    ladder: dict[str, Any] | None = None
    """Merged over the top-level `ladder` (e.g. longer reboot timeouts on bare metal)."""
    safety: dict[str, Any] | None = None
    """Merged over the top-level `safety`: this cluster's budget, breaker, windows (each
    cluster counts its own nodes either way)."""
    smtp: dict[str, Any] | None = None
    """Merged over the top-level `smtp` (e.g. the site team's list in `to`)."""
    notify: dict[str, Any] | None = None
    """Merged over the top-level `notify` (e.g. the site team's channel)."""
    executor: dict[str, Any] | None = None
    """Merged over the top-level `executor` (e.g. the site's Receptor execution node)."""
    leader_election: dict[str, Any] | None = None
    """Merged over the top-level `leader_election` (the Lease lives on this cluster)."""
    sources: dict[str, Any] | None = None
    """Merged over the top-level `sources` (e.g. this cluster's own Loki)."""
    profiles: list[dict[str, Any]] | None = None
    """Replaces (not merges) the top-level profiles for this cluster."""
    bmc: dict[str, Any] | None = None
    """Merged over the top-level `bmc` (e.g. this site's BMC credentials or address label)."""
    nvsentinel: dict[str, Any] | None = None
    """Merged over the top-level `nvsentinel` (e.g. `enabled: false` where NVSentinel does
    not run: a Slurm cluster must say so when the top level turns the hand-off on)."""

    @model_validator(mode="after")
    def _kube_for_kubernetes(self) -> ClusterConfig:
        if self.kind != "slurm" and self.kube is None:
            raise ValueError("needs `kube:` (or `kind: slurm`)")
        return self

    def overrides(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in OVERRIDABLE if getattr(self, k) is not None}
