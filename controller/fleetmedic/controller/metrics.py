"""Prometheus metrics for the controller, on their own registry.

A registry per controller (not the global one) lets tests run two controllers
in one process and keeps the exposition free of unrelated collectors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server
from prometheus_client.metrics_core import Metric

from fleetmedic import __version__
from fleetmedic.model import keys
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy import phases
from fleetmedic.policy.history import decode, parse_time
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.repairtimes import last_repair

# seconds: a GPU reset (a minute), a reboot (minutes to half an hour), a reinstall (an
# hour), a human (hours to days)
REPAIR_BUCKETS = (60, 300, 900, 1800, 3600, 2 * 3600, 6 * 3600, 24 * 3600, 3 * 86400, 7 * 86400)
INCIDENT_BUCKETS = (3600, 6 * 3600, 86400, 3 * 86400, 7 * 86400, 30 * 86400, 90 * 86400)

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
        self.domain_incidents = Counter(
            "fleetmedic_domain_incidents",
            "Domain incidents opened (nodes of one rack or NVLink domain fenced together), "
            "by the domain's label key",
            ["key"],
            registry=r,
        )
        self.domain_incidents_open = Gauge(
            "fleetmedic_domain_incidents_open", "Domain incidents open now", registry=r
        )
        self.cycles = Counter(
            "fleetmedic_cycles",
            "Decision cycles run (each looks at every node once); tests wait on it",
            registry=r,
        )
        self.admitted = Counter(
            "fleetmedic_actions_admitted",
            "Actions admitted by the safety budget and handed to a worker",
            registry=r,
        )
        self.sweeps = Counter(
            "fleetmedic_sweeps",
            "Diagnostic sweeps of idle nodes ended, by result "
            "(pass, fail, unknown, busy: a GPU pod came first, interrupted: an orphan released)",
            ["result"],
            registry=r,
        )
        # each phase that keeps a count of its runs declares it (policy/phases/)
        self.phases = {
            name: Counter(p.metric.name, p.metric.help, [p.metric.label], registry=r)
            for name, p in phases.metrics().items()
            if p.metric is not None
        }
        self.escalations = Counter(
            "fleetmedic_escalations", "Escalation emails by outcome", ["outcome"], registry=r
        )
        self.replacements = Counter(
            "fleetmedic_replacements",
            "Replace rung hand-offs to the cloud, by profile, way (delete_node, "
            "auto_scaling_group) and outcome (ok, held: the day's limit, failed, forbidden)",
            ["profile", "via", "outcome"],
            registry=r,
        )
        self.unhealthy_seconds = Gauge(
            "fleetmedic_unhealthy_node_duration_seconds",
            "Seconds the longest-unhealthy node has been in repair",
            registry=r,
        )
        self.time_to_repair = Histogram(
            "fleetmedic_time_to_repair_seconds",
            "Fence to back in service, per episode (repair: automatic, or manual: a release)",
            ["repair"],
            buckets=REPAIR_BUCKETS,
            registry=r,
        )
        self.time_between = Histogram(
            "fleetmedic_time_between_incidents_seconds",
            "A node's last repair to its next fence (repair: how the last one was done)",
            ["repair"],
            buckets=INCIDENT_BUCKETS,
            registry=r,
        )
        self.state_since = Gauge(
            "fleetmedic_node_state_since_timestamp_seconds",
            "When each node in repair entered its current state (nodes in repair only)",
            ["node", "state"],
            registry=r,
        )
        self._seen: dict[str, NodeView] = {}  # node -> its view at the last observation
        self._since: dict[str, str] = {}  # node -> state its state_since series has
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
        self._transitions(views, now)

    def _transitions(self, views: Sequence[NodeView], now: datetime) -> None:
        """MTTR when a node returns to service, MTBI when a healthy node is fenced, and the
        per-node state-since series (transitions seen by this process; after a restart the
        first observation is the baseline)."""
        present = set()
        for v in views:
            present.add(v.name)
            last = self._seen.get(v.name)
            if last is v:  # unchanged since the last cycle (the informer replaces views)
                continue
            self._seen[v.name] = v
            before = last.state if last is not None else None
            if before is not None and before != v.state:
                if v.state == "healthy":
                    done = last_repair(decode(v.annotations.get(keys.ANN_HISTORY)))
                    if done is not None:
                        self.time_to_repair.labels(repair=done.repair).observe(done.seconds)
                elif before == "healthy":
                    done = last_repair(decode(v.annotations.get(keys.ANN_HISTORY)))
                    if done is not None:
                        gap = max(0.0, now.timestamp() - done.ended)
                        self.time_between.labels(repair=done.repair).observe(gap)
            self._state_since(v)
        for gone in [n for n in self._seen if n not in present]:
            del self._seen[gone]
            self._drop_since(gone)

    def _state_since(self, v: NodeView) -> None:
        since = None
        if v.in_repair:
            # our transition's stamp, else (fenced by the agent or a person) when work began
            fl = InFlight.read(v.annotations)
            since = parse_time(v.annotations.get(keys.ANN_STATE_SINCE)) or (
                parse_time(fl.step_start) if fl and fl.step == v.state else None
            )
        if since is None:
            self._drop_since(v.name)
            return
        if self._since.get(v.name) not in (None, v.state):
            self._drop_since(v.name)
        self._since[v.name] = v.state
        self.state_since.labels(node=v.name, state=v.state).set(since.timestamp())

    def _drop_since(self, node: str) -> None:
        state = self._since.pop(node, None)
        if state is not None:
            self.state_since.remove(node, state)

    def serve(self, address: str, port: int) -> None:
        """Serve /metrics on ``address:port`` (loopback by default in config)."""
        start_http_server(port, addr=address, registry=self.registry)


class ByCluster:
    """Several clusters' registries as one exposition, each sample labelled ``cluster``.

    prometheus_client has no constant labels, and one HTTP endpoint must not repeat a
    family's HELP/TYPE lines, so the families are merged by name here (a collector of our
    own, the library's documented extension point)."""

    def __init__(self, registries: Mapping[str, CollectorRegistry]) -> None:
        self.registries = dict(registries)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for cluster, registry in self.registries.items():
            for fam in registry.collect():
                merged = families.setdefault(
                    fam.name, Metric(fam.name, fam.documentation, fam.type, fam.unit)
                )
                for s in fam.samples:
                    merged.add_sample(
                        s.name, {**s.labels, "cluster": cluster}, s.value, s.timestamp, s.exemplar
                    )
        yield from families.values()


def serve_clusters(registries: Mapping[str, CollectorRegistry], address: str, port: int) -> None:
    """Serve every cluster's metrics on one /metrics (label ``cluster``)."""
    top = CollectorRegistry(auto_describe=False)
    top.register(ByCluster(registries))
    start_http_server(port, addr=address, registry=top)
