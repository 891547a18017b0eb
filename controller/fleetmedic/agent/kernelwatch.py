"""Follow the kernel log in its own thread and fence on a definitive finding at once.

The loop, per line: the scanner (:mod:`fleetmedic.scan`) classifies it; a
finding whose catalog action is ``reset`` or stronger (Xid 79, a row-remap
failure, ...) goes straight to :meth:`NodeWriter.record_finding`, which taints
the Node (or raises a weaker fence of ours: fences only go up) and moves the
watermark in one write. An Xid with a workflow in the catalog (13, 31, 45) is
judged by its context, NVIDIA's WORKFLOW_XID_13/_31/_45
(:mod:`fleetmedic.agent.xidflows`): repeats at one GPC/TPC or on one GPU fence
``diagnose``, the rest is the application's; amdgpu page faults the same way (repeats
of one process are the application's; another process, or a fault right after a GPU
reset, the GPU's). A driver line no rule knows (the safety net's
``<driver>.unclassified``) is counted on the Node with its last line
(:meth:`NodeWriter.record_unclassified`), for ``fleetmedic status``; it never fences.
Any other ``monitor`` (or ``none``) finding whose rule has a threshold (the operator's
``kernel.thresholds``: the catalog ships none) is counted per rule and GPU on the Node
(:meth:`NodeWriter.record_count`, :mod:`fleetmedic.policy.counts`); the
occurrence that reaches the count fences at the threshold's action, in the same
write. A fence by a workflow or a count also records its finding as the node's
``last-finding`` (the fence's evidence, and the watermark) in that write. Other
findings are only logged.

Restarts (see :mod:`fleetmedic.agent.watermark`):

- a file source is read from its start, so a line written while the agent
  was down is acted on; lines before the last kernel banner (an earlier boot)
  are skipped; findings at or before the watermark are not acted on again;
- ``/dev/kmsg`` holds this boot only and is read from its first record; the
  watermark's time on the uptime clock tells old records from new.

While the API server is down the thread waits on the pending write (the log
keeps the later lines), so nothing is lost. The first read of the Node (for
the watermark) happens at the first definitive finding, so following starts
even without the API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fleetmedic.agent import annotations as ann
from fleetmedic.agent.config import KernelWatchConfig
from fleetmedic.agent.logsource import (
    Prescan,
    file_now,
    journal_now,
    kind_of,
    prescan,
    read_boot_id,
)
from fleetmedic.agent.retry import Retrier, follow_log
from fleetmedic.agent.watermark import Mark, is_stale, locate, segment_id
from fleetmedic.agent.writer import NodeWriter, Outcome, now_rfc3339
from fleetmedic.agent.xidflows import XidFlows, describe
from fleetmedic.model import keys
from fleetmedic.policy import counts
from fleetmedic.policy.strikes import FENCING_ACTIONS, Observation
from fleetmedic.scan import (
    BANNER,
    Dedup,
    Finding,
    Scanner,
    follow_file,
    follow_journal,
    follow_kmsg,
    is_banner,
    load_catalog,
    read_kmsg,
)
from fleetmedic.scan.catalog import Threshold, parse_threshold, threshold_for

log = logging.getLogger("fleetmedic.agent")
UNCLASSIFIED = ".unclassified"
NET_BURST = 10.0
"""Seconds within which unclassified lines are one event (one Node write)."""


__all__ = ["KernelWatch", "describe", "merged_thresholds"]


class KernelWatch:
    """``run()`` follows until ``stop``; ``once=True`` reads what is there and returns."""

    def __init__(
        self,
        cfg: KernelWatchConfig,
        writer: NodeWriter,
        retrier: Retrier,
        stop: threading.Event,
        *,
        once: bool = False,
        clock: Callable[[], float] = time.time,
        on_finding: Callable[[Finding], None] = lambda f: None,
        flows: XidFlows | None = None,
    ) -> None:
        self.cfg = cfg
        self.flows = flows or XidFlows()
        self.on_finding = on_finding  # metrics
        self.writer = writer
        self.retrier = retrier
        self.stop = stop
        self.once = once
        self.clock = clock
        self.boot = read_boot_id(cfg.boot_id_file)
        self.kind = kind_of(cfg.source)
        self.acted = 0  # findings acted on (fenced or recorded) by this process
        self.skipped = 0  # stale findings not acted on again
        self._mark: Mark | None = None
        self._mark_known = False
        self._mark_line: int | None = None
        self._pre = Prescan()
        self._seg = ""
        self._start = 0
        self._dedup = Dedup(cfg.dedup_window)
        self.thresholds = merged_thresholds(cfg.thresholds)
        self._recent: dict[str, float] = {}  # count key -> time last sent to the Node
        self._net_last: float | None = None  # the last unclassified finding sent

    @property
    def path(self) -> str:
        return "/dev/kmsg" if self.cfg.source == "kmsg" else self.cfg.source

    # -- the thread -------------------------------------------------------------
    def run(self) -> None:
        if self.kind == "none":
            return
        follow_log(
            self._follow,
            self.stop,
            self.once,
            f"kernel log {self.path}",
            rest_after_end=self.kind != "file",  # journalctl or kmsg ended: start again
        )

    def _lines(self) -> Iterator[str]:
        poll = self.cfg.poll
        if self.once:
            if self.kind == "file":
                return file_now(self.path)
            return read_kmsg(self.path) if self.kind == "kmsg" else journal_now()
        if self.kind == "file":
            return follow_file(self.path, from_start=True, stop=self.stop, poll=poll)
        if self.kind == "kmsg":
            return follow_kmsg(self.path, from_start=True, stop=self.stop, poll=max(poll, 0.5))
        return follow_journal(args=("-b",), stop=self.stop, poll=max(poll, 0.5))

    def _follow(self) -> None:
        self._pre = prescan(self.path) if self.kind == "file" else Prescan()
        self._start, self._seg = self._pre.start, self._pre.seg
        self._mark_line = locate(self._mark, self._pre.seen) if self._mark_known else None
        # Dedup (an Xid storm is one finding) after the watermark: a stale line must not
        # hide a new occurrence of the same fault.
        scanner, self._dedup = Scanner(dedup=False), Dedup(self.cfg.dedup_window)
        log.info(
            "kernel log %s: following (boot %s, current boot from line %d)",
            self.path,
            self.boot[:8],
            self._start,
        )
        lines = self._lines()
        # Only a file spans boots. /dev/kmsg and ``journalctl -b`` hold this boot alone, and
        # their banner may have scrolled away: the boot id tells their boots apart.
        segments = self.kind == "file"
        try:
            for n, line in enumerate(lines, start=1):
                if n < self._start:
                    continue
                if segments and n > self._start and BANNER in line and is_banner(line):
                    self._new_boot(line, n)
                    continue
                for finding in scanner.feed(line, n):
                    self.on_finding(finding)
                    self._handle(finding, finding.line)
            for finding in scanner.flush():  # the end of what there is (--once)
                self.on_finding(finding)
                self._handle(finding, finding.line)
        finally:
            close = getattr(lines, "close", None)
            if close:
                close()

    def _new_boot(self, banner: str, n: int) -> None:
        """A kernel banner while following: what came before is an earlier boot."""
        self._start, self._seg, self._mark_line = n, segment_id(banner, n), None
        self.boot = read_boot_id(self.cfg.boot_id_file)
        log.info("kernel log %s: new boot at line %d", self.path, n)

    # -- one finding ------------------------------------------------------------
    def _when(self, f: Finding) -> tuple[float, str]:
        """The finding's own time and clock (replay-safe), else the agent's clock."""
        if f.time is not None and f.clock:
            return f.time, f.clock
        return self.clock(), "agent"

    def _handle(self, f: Finding, n: int) -> None:
        when, clock = self._when(f)
        scope = f"{self.boot}/{self._seg}"
        self.flows.note(scope, f, when)
        if f.action not in FENCING_ACTIONS:
            log.info(
                "kernel log: %s at line %d (%s): %s", describe(f), n, f.action, f.message[:120]
            )
            verdict = self.flows.judge(
                self.writer,
                f,
                scope=scope,
                boot=scope,
                when=when,
                clock=clock,
                call=self._noting_mark(n),
                mark=self._marker(f, n),
            )
            if verdict is not None:
                self.acted += verdict.fired
                return
            limit = threshold_for(self.thresholds, f.rule)
            if limit is not None and limit.count > 0:
                self._count(f, n, limit)
            elif f.rule.endswith(UNCLASSIFIED):
                self._net(f)
            return
        self._load_mark()
        if is_stale(f, n, self._mark, boot=self.boot, seg=self._seg, mark_line=self._mark_line):
            self.skipped += 1
            log.info(
                "kernel log: %s at line %d was handled before (watermark); not acting again",
                describe(f),
                n,
            )
            return
        if not self._dedup.admit(f, f"{self.boot}/{self._seg}"):
            log.debug(
                "kernel log: %s at line %d repeats a finding of the last %gs",
                describe(f),
                n,
                self.cfg.dedup_window,
            )
            return
        mark = self._marker(f, n)
        obs = Observation("kernel", "problem", f"{describe(f)} ({f.rule})", f.action)
        out = self.retrier.call(
            "record kernel finding", lambda: self.writer.record_finding(obs, mark)
        )
        self._mark, self._mark_line = mark(out.fenced is not None), n
        self.acted += 1
        if out.raised:
            log.warning(
                "kernel log: %s at line %d (%s): raised repair=%s to repair=%s",
                describe(f),
                n,
                f.action,
                out.before_repair,
                out.raised,
            )
        elif not out.fenced and not out.held:  # (held: the writer said why)
            log.info(
                "kernel log: %s at line %d (%s); node already under repair (%s)",
                describe(f),
                n,
                f.action,
                out.before_repair,
            )

    def _count(self, f: Finding, n: int, limit: Threshold) -> None:
        """Count a monitor finding on the Node; fence when it reaches ``limit``."""
        when, clock = self._when(f)
        key = counts.key_of(f.rule, f.pci)
        last = self._recent.get(key)
        if last is not None and abs(when - last) <= limit.burst:
            return  # the same event (a storm of identical lines): no API call
        self._recent[key] = when
        if len(self._recent) > counts.MAX_KEYS:
            self._recent.clear()
        reason = f"{describe(f)} ({f.rule}) {limit.count} times within {limit.window:g}s"
        out, added = self.retrier.call(
            "count kernel finding",
            lambda: self.writer.record_count(
                boot=f"{self.boot}/{self._seg}",
                key=key,
                when=when,
                clock=clock,
                limit=counts.Limit(limit.count, limit.window, limit.burst),
                crossing=Observation("kernel", "problem", reason, limit.action),
                mark=self._marker(f, n),
            ),
        )
        self._moved(out, n)
        if added.crossed:
            self.acted += 1
            log.warning(
                "kernel log: %s at line %d: threshold reached (%d in %gs): %s",
                describe(f),
                n,
                limit.count,
                limit.window,
                f"fenced repair={out.fenced}" if out.fenced else "node already under repair",
            )

    def _net(self, f: Finding) -> None:
        """Count a line no rule knows on the Node (count and last line, for status)."""
        when, clock = self._when(f)
        if self._net_last is not None and abs(when - self._net_last) <= NET_BURST:
            return  # the same event (a storm of one new message): no API call
        self._net_last = when
        self.retrier.call(
            "count unclassified finding",
            lambda: self.writer.record_unclassified(
                boot=f"{self.boot}/{self._seg}",
                when=when,
                clock=clock,
                rule=f.rule,
                message=f.message,
            ),
        )

    def _marker(self, f: Finding, n: int) -> Callable[[bool], Mark]:
        """Builds the watermark for ``f`` at line ``n`` (``acted``: it fenced)."""
        stamp = now_rfc3339(self.clock)
        return lambda acted: Mark.of(
            f, boot=self.boot, seg=self._seg, line=n, acted=acted, at=stamp
        )

    def _noting_mark(self, n: int) -> Callable[[str, Callable[[], Any]], Any]:
        """The retrier's call for a workflow's write (which returns the write's outcome and
        the verdict), keeping our copy of the watermark when the write moved it."""

        def call(what: str, fn: Callable[[], tuple[Outcome, Any]]) -> tuple[Outcome, Any]:
            out, verdict = self.retrier.call(what, fn)
            self._moved(out, n)
            return out, verdict

        return call

    def _moved(self, out: Outcome, n: int) -> None:
        """A fence by a workflow or a count moved the watermark on the Node to line ``n``."""
        if out.marked is not None:
            self._mark, self._mark_line, self._mark_known = out.marked, n, True

    def _load_mark(self) -> None:
        if self._mark_known:
            return
        node = self.retrier.call("read node", self.writer.read)
        self._mark = Mark.from_json(
            ann.kernel_mark_json(ann.annotation_json(node, keys.ANN_LAST_FINDING))
        )
        self._mark_known = True
        self._mark_line = locate(self._mark, self._pre.seen)


def merged_thresholds(overrides: Mapping[str, Any]) -> dict[str, Threshold]:
    """The agent config's ``kernel.thresholds`` over the catalog's (config keys first,
    so an override pattern wins over a catalog pattern)."""
    mine = {str(k): parse_threshold("kernel.thresholds", str(k), v) for k, v in overrides.items()}
    catalog = load_catalog().thresholds
    return {**mine, **{k: v for k, v in catalog.items() if k not in mine}}
