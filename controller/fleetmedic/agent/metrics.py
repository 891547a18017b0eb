"""Prometheus metrics of the node agent (``--metrics-port``), on their own registry.

What an on-call engineer asks of an agent: is it alive and writing (the time of its last
successful write to its Node; an alert fires when it stops), what do its checks say,
what has it found in the kernel log, how close is the node to being fenced (strikes).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from fleetmedic.checks.base import CheckResult
from fleetmedic.policy.strikes import Strikes
from fleetmedic.policy.workflow import Verdict
from fleetmedic.scan import Finding


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.checks = Counter(
            "fleetmedic_agent_checks",
            "Check results by check and status (ok, problem, unknown)",
            ["check", "status"],
            registry=r,
        )
        self.findings = Counter(
            "fleetmedic_agent_findings",
            "Kernel-log findings by kind, code and the catalog's action",
            ["kind", "code", "action"],
            registry=r,
        )
        self.workflows = Counter(
            "fleetmedic_agent_workflow_decisions",
            "Xids judged by NVIDIA's workflows (13, 31, 45), by the workflow's rule, the "
            "context found (same-place, same-gpu, different-places, solo, follows, ...) and "
            "the action it called for",
            ["workflow", "context", "action"],
            registry=r,
        )
        self.unclassified = Counter(
            "fleetmedic_agent_unclassified_findings",
            "GPU driver errors no catalog rule knows (rule ids ending in .unclassified), by rule",
            ["rule"],
            registry=r,
        )
        self.strikes = Gauge(
            "fleetmedic_agent_strikes",
            "Consecutive failed rounds towards fencing, by category",
            ["category"],
            registry=r,
        )
        self.last_write = Gauge(
            "fleetmedic_agent_last_write_timestamp_seconds",
            "When the agent last wrote its Node successfully (unix time)",
            registry=r,
        )

    def round(self, results: list[CheckResult], strikes: Strikes | None) -> None:
        for res in results:
            self.checks.labels(check=res.name, status=res.status).inc()
        if strikes is not None:
            self.strikes.labels(category="gpu").set(strikes.gpu)
            self.strikes.labels(category="network").set(strikes.network)

    def finding(self, f: Finding) -> None:
        code = "" if f.code is None else str(f.code)
        self.findings.labels(kind=f.kind, code=code, action=f.action or "none").inc()
        if f.rule.endswith(".unclassified"):
            self.unclassified.labels(rule=f.rule).inc()

    def verdict(self, workflow: str, v: Verdict) -> None:
        self.workflows.labels(workflow=workflow, context=v.context, action=v.action).inc()

    def wrote(self) -> None:
        self.last_write.set(time.time())

    def serve(self, address: str, port: int) -> None:
        start_http_server(port, addr=address, registry=self.registry)
