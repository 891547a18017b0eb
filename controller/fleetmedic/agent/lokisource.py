"""Detect GPU faults from Loki instead of on each node: ``fleetmedic watch loki``.

For clusters that already ship node kernel logs (a journal or dmesg DaemonSet) and pod
logs to Loki, as Konduktor's node health controller reads them. New lines come through
Loki's websocket tail (the default, :mod:`fleetmedic.agent.lokitail`: on start and after
every reconnect a poll round catches up from the cursor first), or by polling
(``mode: poll``). Every poll round, and every tail batch:

- each LogQL query (kernel-log streams, pod-log streams; a line filter with the scanner's
  trigger literals so Loki drops the chatter) is read from its cursor to now (a tail
  batch: its lines past the cursor);
- every line goes through the same scanner and catalogs as the agent (the workload catalog
  classifies CUDA/NCCL lines of pod logs), one scanner per stream, so a multi-line report
  stays one finding;
- a finding is attributed to a Node by the stream's node label (``node_name`` from Promtail
  and Alloy, ``host`` from Fluent Bit, ``k8s_node_name`` from the OpenTelemetry
  collector), for pod logs too (every common shipper labels pod streams with the node);
- it fences through the agent's :class:`~fleetmedic.agent.writer.NodeWriter`: the same
  strikes, annotations, thresholds, Xid workflows (:mod:`fleetmedic.agent.xidflows`,
  judged on each node's own history, timed by the line's Loki timestamp) and taints,
  and the same rule that fences only go up, so the controller cannot tell which
  detector fenced a node.

The cursor, like Promtail's positions file, is per query a floor timestamp (30 s behind
the newest line handled: lines of several streams reach Loki out of timestamp order) and
the hashes of the lines handled since (:class:`Cursor`). It is written only after a
batch's fences were written, and only when it moved, so after a restart, a crash or a
Loki outage the source resumes where it was: a line is never skipped, and a line handled
is not handled twice. ``fleetmedic watch loki`` keeps it in a file
(``--cursor-file``, replaced atomically: the source then needs no write access to
anything but Nodes). Run by the controller, it lives on the controller's ConfigMap
(:class:`ConfigMapCursor`), so the controller that takes over leadership resumes where
the last leader stopped. Loki slow or down: the source backs off (polling: from the poll
interval, doubling to 60 s; tailing: 2 s doubling to 60 s), with one log line when Loki
goes away and one when it is back; never a crash loop.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

from fleetmedic.adapters.loki import MAX_BACKOFF, Entry, LokiClient
from fleetmedic.adapters.nodedocs import NodeDocs
from fleetmedic.agent.kernelwatch import describe, merged_thresholds
from fleetmedic.agent.lokicursor import ConfigMapCursor as ConfigMapCursor  # (re-exported)
from fleetmedic.agent.lokicursor import Cursor, CursorStore
from fleetmedic.agent.lokicursor import FileCursor as FileCursor  # (re-exported)
from fleetmedic.agent.watermark import Mark
from fleetmedic.agent.writer import NodeWriter, now_rfc3339
from fleetmedic.agent.xidflows import XidFlows
from fleetmedic.errors import ConfigError, FleetmedicError, TemporaryError
from fleetmedic.model.vocabulary import Vocabulary
from fleetmedic.policy import counts
from fleetmedic.policy.strikes import FENCING_ACTIONS, Observation
from fleetmedic.scan import Dedup, Finding, Scanner
from fleetmedic.scan.catalog import threshold_for

log = logging.getLogger("fleetmedic.loki")

NODE_LABELS = ("node_name", "host", "k8s_node_name", "nodename", "hostname", "node")
"""Stream labels that name the node a line came from, in the order tried (see module doc)."""

KERNEL_QUERIES = (
    '{transport="kernel"}',  # Promtail/Alloy journal scrape: the kernel's journal lines
    '{source="kmsg"}',  # Fluent Bit's kmsg input
    '{k8s_daemonset_name="dmesg"}',  # Konduktor's dmesg DaemonSet via the OTel collector
)
POD_QUERIES = (
    '{namespace=~".+", transport!="kernel", source!="kmsg"}',  # Promtail, Alloy, Fluent Bit
    '{k8s_namespace_name=~".+", k8s_daemonset_name!="dmesg"}',  # OpenTelemetry collector
)
MODES = ("tail", "poll")
SCANNERS = 4096  # streams with a scanner kept (multi-line context), oldest dropped first


def with_filter(query: str, triggers: Sequence[str]) -> str:
    """``query`` with a line filter for the scanner's trigger literals (Loki drops the rest)."""
    if "|" in query.partition("}")[2]:
        return query  # the operator wrote a pipeline of their own
    alternation = "|".join(re.escape(t) for t in sorted(set(triggers)))
    return f"{query} |~ {json.dumps(alternation)}"


@dataclass(frozen=True)
class LokiSourceConfig:
    endpoint: str
    kernel_queries: tuple[str, ...] = KERNEL_QUERIES
    pod_queries: tuple[str, ...] = POD_QUERIES
    node_labels: tuple[str, ...] = NODE_LABELS
    tenant: str | None = None
    mode: str = "tail"  # tail | poll (see agent/lokitail.py)
    poll_interval: float = 2.0
    tail_retry: float = 300.0  # after the tail was refused, poll this long, then try again
    lookback: float = 3600.0  # no cursor yet: start this far back
    batch: int = 5000
    thresholds: Mapping[str, object] = field(default_factory=dict)
    dedup_window: float = 600.0  # a fencing finding repeated on a node within this: once

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"loki mode: {self.mode!r} is not one of {', '.join(MODES)}")
        # empty means the defaults, as the command line and the controller's config say
        for name, default in (
            ("kernel_queries", KERNEL_QUERIES),
            ("pod_queries", POD_QUERIES),
            ("node_labels", NODE_LABELS),
        ):
            if not getattr(self, name):
                object.__setattr__(self, name, default)


def node_writers(kube: NodeDocs, vocab: Vocabulary) -> Callable[[str], NodeWriter]:
    """The source's ``writer_for``: one NodeWriter per node, made when first needed. ``kube``
    is the cluster's nodes: the API server, or a Slurm cluster (adapters/slurmdoc.py)."""
    writers: dict[str, NodeWriter] = {}
    return lambda node: writers.setdefault(node, NodeWriter(kube, node, vocab))


class LokiMetrics:
    """The source's own figures, on the registry it is given (the agent's or the controller's)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.up = Gauge(
            "fleetmedic_loki_up", "1 while Loki answers the source's queries", registry=r
        )
        self.lines = Counter(
            "fleetmedic_loki_lines", "Log lines read from Loki and classified", registry=r
        )
        self.findings = Counter(
            "fleetmedic_loki_findings",
            "Findings from Loki lines, by what came of them",
            ["outcome"],  # fenced | counted | judged | unattributed
            registry=r,
        )
        self.workflows = Counter(
            "fleetmedic_loki_workflow_decisions",
            "Xids judged by NVIDIA's workflows (13, 31, 45), as the agent's metric of that name",
            ["workflow", "context", "action"],
            registry=r,
        )
        self.last_poll = Gauge(
            "fleetmedic_loki_last_poll_timestamp_seconds",
            "When the source last read every query to the end",
            registry=r,
        )


class LokiSource:
    """``run(stop)`` follows Loki until ``stop`` (tail or poll, by ``cfg.mode``);
    ``poll()`` is one query_range round (``--once``, and the tail's catch-up)."""

    def __init__(
        self,
        cfg: LokiSourceConfig,
        writer_for: Callable[[str], NodeWriter],
        store: CursorStore,
        *,
        client: LokiClient | None = None,
        clock: Callable[[], float] = time.time,
        metrics: LokiMetrics | None = None,
    ) -> None:
        self.cfg, self.writer_for, self.store, self.clock = cfg, writer_for, store, clock
        self.client = client or LokiClient(cfg.endpoint, tenant=cfg.tenant)
        self.metrics = metrics or LokiMetrics(CollectorRegistry())
        self.scanner_proto = Scanner()
        triggers = self.scanner_proto.triggers
        self.queries = [with_filter(q, triggers) for q in (*cfg.kernel_queries, *cfg.pod_queries)]
        self.cursor = Cursor()
        self._cursor_loaded = False  # loaded by the first poll (the store may be remote)
        self.thresholds = merged_thresholds(dict(cfg.thresholds))
        self._scanners: OrderedDict[str, Scanner] = OrderedDict()
        self._dedup = Dedup(cfg.dedup_window)
        self.flows = XidFlows(
            on_verdict=lambda rule, v: self.metrics.workflows.labels(
                workflow=rule, context=v.context, action=v.action
            ).inc()
        )
        self._down_since: float | None = None
        self.fenced = 0
        self.counted = 0
        self.unattributed = 0
        self.polls = 0

    # -- the loop ---------------------------------------------------------------------
    def run(self, stop: threading.Event, active: Callable[[], bool] = lambda: True) -> None:
        """Follow Loki until ``stop``, while ``active()`` (the controller's leadership: one
        source per cluster reads and fences): through the tail (:mod:`.lokitail`), or by
        polling (``mode: poll``). Becoming active again reloads the cursor, which another
        controller may have moved meanwhile. Any error (Loki down, the API server down)
        backs off and retries, one log line each way."""
        log.info(
            "following %d LogQL queries on %s by %s (cursor %s)",
            len(self.queries),
            self.cfg.endpoint,
            "tail" if self.cfg.mode == "tail" else f"polling every {self.cfg.poll_interval:g}s",
            self.store,
        )
        if self.cfg.mode == "tail":
            from fleetmedic.agent.lokitail import Follower

            Follower(self).run(stop, active)
            return
        self.run_polling(stop, active)

    def run_polling(
        self,
        stop: threading.Event,
        active: Callable[[], bool] = lambda: True,
        until: Callable[[], bool] = lambda: False,
    ) -> None:
        """Poll every ``poll_interval`` until ``stop`` or ``until()`` (the tail's fallback
        polls for a while, then tries the tail again)."""
        delay = self.cfg.poll_interval
        while not stop.is_set() and not until():
            if not active():
                self._cursor_loaded = False
                stop.wait(self.cfg.poll_interval)
                continue
            try:
                self.poll()
                delay = self.cfg.poll_interval
            except FleetmedicError as exc:  # Loki, or the cursor's ConfigMap: never a crash
                self.failed(exc)
                delay = min(MAX_BACKOFF, max(delay * 2, getattr(exc, "delay", 0.0)))
            stop.wait(delay)

    def poll(self) -> int:
        """One round over every query; returns the number of new lines handled."""
        if not self._cursor_loaded:
            self.cursor, self._cursor_loaded = self.store.load(), True
        handled = 0
        now_ns = int(self.clock() * 1e9)
        for query in self.queries:
            handled += self._drain(query, now_ns)
        if self._down_since is not None:
            log.warning("loki reachable again after %.0fs", self.clock() - self._down_since)
            self._down_since = None
        self.polls += 1
        self.metrics.up.set(1)
        self.metrics.last_poll.set(self.clock())
        self.metrics.lines.inc(handled)
        return handled

    def _drain(self, query: str, now_ns: int) -> int:
        handled = 0
        start = self.cursor.floor(query) or now_ns - int(self.cfg.lookback * 1e9)
        while True:
            entries = self.client.query_range(query, start, now_ns, self.cfg.batch)
            handled += self.take(query, entries)
            # a full page: the next starts at its last line (inclusive: the seen skip it)
            if len(entries) < self.cfg.batch or entries[-1].ts <= start:
                return handled
            start = entries[-1].ts

    def take(self, query: str, entries: Sequence[Entry]) -> int:
        """Handle those of ``entries`` (of ``query``, oldest first) past the cursor, then
        move the cursor and save it; returns how many were new. The poll's reads and the
        tail's batches both come here, so a line read by both is handled once."""
        fresh = self.cursor.new(query, entries)
        touched: dict[str, Entry] = {}
        for e in fresh:
            touched[self._line(e)] = e
        for stream, last in touched.items():  # the batch's end: a held report comes out
            self._flush(stream, last)
        if fresh:  # (an unmoved cursor is not written: no API write per idle poll)
            self.cursor.advance(query, fresh)
            self.store.save(self.cursor)  # after the fences: nothing is lost
        return len(fresh)

    def failed(self, exc: FleetmedicError) -> None:
        """Loki (or the cursor's home) failed: one log line until it answers again."""
        self.metrics.up.set(0)
        if self._down_since is None:
            self._down_since = self.clock()
            what = "loki unreachable" if isinstance(exc, TemporaryError) else "loki source"
            log.error("%s, retrying with back-off: %s", what, exc)

    # -- one line ---------------------------------------------------------------------
    def _line(self, e: Entry) -> str:
        """Handle one line; returns its stream's key."""
        stream = json.dumps(sorted(e.labels.items()))
        # no scanner dedup: a repeated monitor finding must be counted (the Node's counts
        # know one event from a storm of identical lines by its time: the rule's burst)
        scanner = self._scanners.pop(stream, None) or Scanner(
            self.scanner_proto.catalog, dedup=False
        )
        self._scanners[stream] = scanner
        if len(self._scanners) > SCANNERS:
            self._scanners.popitem(last=False)
        self._findings(scanner.feed(e.line), e, stream)
        return stream

    def _flush(self, stream: str, e: Entry) -> None:
        """A report the scanner held for its next line (a page fault waiting for its
        process line) when no next line came in this batch: judged now."""
        scanner = self._scanners.get(stream)
        if scanner is not None:
            self._findings(scanner.flush(), e, stream)

    def _findings(self, found: Sequence[Finding], e: Entry, stream: str) -> None:
        node = next((e.labels[k] for k in self.cfg.node_labels if e.labels.get(k)), None)
        for f in found:
            if node is None:
                self.unattributed += 1
                self.metrics.findings.labels(outcome="unattributed").inc()
                log.warning("loki: %s in a stream with no node label (%s)", describe(f), stream)
                continue
            self._finding(node, f, e)

    def _finding(self, node: str, f: Finding, e: Entry) -> None:
        writer = self.writer_for(node)
        when = e.ts / 1e9
        self.flows.note(node, f, when)
        stamp = now_rfc3339(self.clock)

        def mark(acted: bool) -> Mark:
            """The finding as the node's last-finding (the fence's evidence)."""
            return Mark.of(f, boot="loki", seg="loki", line=0, acted=acted, at=stamp)

        if f.action in FENCING_ACTIONS:
            if not self._dedup.admit(f, node):
                return  # the same fault again within the dedup window: fenced already
            obs = Observation("kernel", "problem", f"{describe(f)} ({f.rule}) via loki", f.action)
            out = writer.record_finding(obs, mark)
            self.fenced += 1
            self.metrics.findings.labels(outcome="fenced").inc()
            log.warning(
                "loki: %s on %s (%s): %s",
                describe(f),
                node,
                f.action,
                f"fenced repair={out.fenced}"
                if out.fenced
                else ("not written (someone else's drain)" if out.held else "already under repair"),
            )
            return
        verdict = self.flows.judge(
            writer, f, scope=node, boot="loki", when=when, clock="loki", mark=mark
        )
        if verdict is not None:
            self.metrics.findings.labels(outcome="judged").inc()
            return
        limit = threshold_for(self.thresholds, f.rule)
        if limit is None or limit.count <= 0:
            log.info("loki: %s on %s (%s): %s", describe(f), node, f.action, f.message[:120])
            return
        reason = f"{describe(f)} ({f.rule}) {limit.count} times within {limit.window:g}s"
        out, added = writer.record_count(
            boot="loki",
            key=counts.key_of(f.rule, f.pci),
            when=when,
            clock="loki",
            limit=counts.Limit(limit.count, limit.window, limit.burst),
            crossing=Observation("kernel", "problem", reason, limit.action),
            mark=mark,
        )
        self.counted += 1
        self.metrics.findings.labels(outcome="counted").inc()
        if added.crossed:
            log.warning("loki: %s on %s: threshold reached (fenced=%s)", reason, node, out.fenced)
