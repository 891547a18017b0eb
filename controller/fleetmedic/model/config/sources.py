"""The ``sources:`` section: detectors the controller runs itself, beside the node agents.

    sources:
      loki:                                   # Konduktor's path: faults from the cluster's Loki
        endpoint: http://loki.monitoring:3100 # unset: $LOG_ENDPOINT, as Konduktor reads it
        kernel_queries: ['{job="node-dmesg"}'] # empty: what the common shippers label
        pod_queries: []                       # empty: every namespace's pod logs
        node_labels: []                       # empty: node_name, host, k8s_node_name, ...
        mode: tail                            # tail (default) or poll

It is the same source as ``fleetmedic watch loki`` (same scanner, catalogs, strikes and
taints). Run by the controller, only the leader reads and fences, and the cursor lives on
the controller's ConfigMap (``safety.pause_configmap``, key ``loki-cursor``) so the next
leader resumes where the last one stopped; ``cursor_file`` keeps it in a file instead.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fleetmedic.model.config.types import ConfigPath, Duration, Section


class LokiConfig(Section):
    endpoint: str | None = Field(None, pattern=r"^https?://")
    """Loki's HTTP address. Unset: the LOG_ENDPOINT environment variable."""
    tenant: str | None = None
    """X-Scope-OrgID, when Loki runs with auth (multi-tenant)."""
    kernel_queries: tuple[str, ...] = ()
    """LogQL selectors of node kernel-log streams. Empty: the journal's kernel lines
    ({transport="kernel"}), Fluent Bit's kmsg input, a dmesg DaemonSet via OpenTelemetry."""
    pod_queries: tuple[str, ...] = ()
    """LogQL selectors of pod-log streams (CUDA/NCCL lines). Empty: every namespace."""
    node_labels: tuple[str, ...] = ()
    """Stream labels that name the node, in order. Empty: node_name, host, k8s_node_name,
    nodename, hostname, node."""
    mode: Literal["tail", "poll"] = "tail"
    """tail: follow Loki's websocket tail (/loki/api/v1/tail) for new lines, catching up
    with query_range from the cursor after every reconnect; a line reaches the source
    within Loki's 0.5 s tail throttle and an idle cluster costs Loki no queries. Where the
    tail is refused (a proxy without websockets, Loki's tail limits) it polls, and tries
    the tail again every 5 minutes. poll: only query_range, every poll_interval."""
    poll_interval: Duration = Field(2, gt=0, le=300)
    """How often every query is read to now (one query_range per selector) when polling."""
    lookback: Duration = Field(3600, gt=0)
    """With no cursor yet, how far back the first read starts."""
    cursor_file: ConfigPath | None = None
    """Keep the cursor in this file instead of on the controller's ConfigMap (one
    controller, no leader election)."""


class SourcesConfig(Section):
    loki: LokiConfig | None = None
    """Unset: no Loki source (the node agents are the detectors)."""
