"""Prometheus metrics for the controller, on their own registry.

A registry per controller (not the global one) lets tests run two controllers
in one process and keeps the exposition free of unrelated collectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

from fleetmedic import __version__
from fleetmedic.model import keys
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy.history import parse_time

STATES = ("healthy", *REPAIR_STATES)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.nodes = Gauge(
            "fleetmedic_nodes", "Nodes in the selected pool by repair state", ["state"], registry=r
        )
        self.slow_network = Gauge(
            "fleetmedic_slow_network_nodes", "Nodes carrying the slow-network taint", registry=r
        )
        self.remediations = Counter(
            "fleetmedic_remediations",
            "Finished remediation steps by step and result",
            ["step", "result"],
            registry=r,
        )
        self.duration = Histogram(
            "fleetmedic_remediation_duration_seconds",
            "Wall time of one remediation step (playbook run)",
            ["step"],
            buckets=(5, 10, 20, 30, 45, 60, 90, 120, 300, 600, 1200, 3600),
            registry=r,
        )
        self.in_flight = Gauge("fleetmedic_runs_in_flight", "Playbook runs under way", registry=r)
        self.leader = Gauge(
            "fleetmedic_leader", "1 while this controller holds the leader Lease", registry=r
        )
        self.breaker_open = Gauge(
            "fleetmedic_circuit_breaker_open",
            "1 while the storm circuit breaker pauses automation (per profile)",
            ["profile"],
            registry=r,
        )
        self.paused = Gauge("fleetmedic_paused", "1 while the pause switch is on", registry=r)
        self.escalations = Counter(
            "fleetmedic_escalations", "Escalation emails by outcome", ["outcome"], registry=r
        )
        self.unhealthy_seconds = Gauge(
            "fleetmedic_unhealthy_node_duration_seconds",
            "Seconds the longest-unhealthy node has been in repair",
            registry=r,
        )
        self.build = Info("fleetmedic_build", "Build information", registry=r)
        self.build.info({"version": __version__})
        for state in STATES:
            self.nodes.labels(state=state)

    def set_states(self, counts: dict[str, int], slow_network: int) -> None:
        for state in STATES:
            self.nodes.labels(state=state).set(counts.get(state, 0))
        self.slow_network.set(slow_network)

    def observe(self, views: Sequence[NodeView], now: datetime) -> None:
        """The fleet gauges from one cycle's views."""
        counts: dict[str, int] = {}
        longest = 0.0
        for v in views:
            counts[v.state] = counts.get(v.state, 0) + 1
            if v.in_repair:
                since = parse_time(v.annotations.get(keys.ANN_STATE_SINCE))
                if since:
                    longest = max(longest, (now - since).total_seconds())
        self.set_states(counts, sum(1 for v in views if v.slow_network))
        self.unhealthy_seconds.set(longest)

    def serve(self, address: str, port: int) -> None:
        """Serve /metrics on ``address:port`` (loopback by default in config)."""
        start_http_server(port, addr=address, registry=self.registry)
