"""Follow NVIDIA Fabric Manager's own log, and fence on what it reports, as kernel findings.

On NVSwitch systems Fabric Manager (``nv-fabricmanager``) trains and watches the NVLink
fabric. Its log (``/var/log/fabricmanager.log``, or its systemd unit's journal) says
things the kernel log does not: NVSwitch and GPU NVLink fatal errors as the fabric sees
them, a topology it gave up on, and the service stopping, after which NVLink is gone
for every job on the node. The catalog's ``fabricmanager_catalog.yaml`` maps them to
actions (Fabric Manager's restart guidance sets the rung), and this thread acts on them
through the same :class:`~fleetmedic.agent.writer.NodeWriter` as the kernel log: the
same taints, strikes, fences that only go up, the finding as the fence's evidence
(``last-finding``, with the kernel log's watermark kept inside it).

Which lines are new. Fabric Manager's log outlives reboots and its lines carry the wall
clock (``[Jul 23 2024 07:53:55] [ERROR] ...``). On start the thread reads what the source
holds and acts only on lines newer than both this boot (a reboot since handled them) and
its own watermark (the ``fm`` part of ``monitor-counts``: the time of the last line it
acted on), then follows new lines. A line without a time is acted on only when it comes
in while following (it cannot be told from an old one). Known gap: Fabric Manager logs
its local time; a node whose clock or time zone changes between the line and the read
may act on a line twice or miss one.

Where: ``fabricmanager.source`` in the agent config: ``auto`` (the default: the log file
if it exists, else nothing: absent where Fabric Manager does not run), a file path,
``journal`` (``journalctl -u <unit>``), or ``none``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

from fleetmedic.agent import annotations as ann
from fleetmedic.agent.config import FabricManagerConfig
from fleetmedic.agent.logsource import file_now, journal_now
from fleetmedic.agent.retry import Retrier, follow_log
from fleetmedic.agent.writer import NodeWriter, now_rfc3339
from fleetmedic.agent.xidflows import describe
from fleetmedic.policy.strikes import FENCING_ACTIONS, Observation
from fleetmedic.scan import Dedup, Finding, Scanner, follow_file, follow_journal
from fleetmedic.scan.fmrecord import RECORD_WAIT

log = logging.getLogger("fleetmedic.agent")


def boot_time(stat_file: str) -> float:
    """This boot's start as Unix time (``btime`` in /proc/stat); 0 when unreadable."""
    try:
        with open(stat_file, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def resolve(cfg: FabricManagerConfig) -> str:
    """``file``, ``journal`` or ``none``: where this node's Fabric Manager logs, if anywhere."""
    if cfg.source == "auto":
        return "file" if os.path.isfile(cfg.path) else "none"
    if cfg.source in ("journal", "none"):
        return cfg.source
    return "file"


class FabricWatch:
    """``run()`` follows until ``stop``; ``once=True`` reads what is there and returns."""

    def __init__(
        self,
        cfg: FabricManagerConfig,
        writer: NodeWriter,
        retrier: Retrier,
        stop: threading.Event,
        *,
        boot: str,
        once: bool = False,
        clock: Callable[[], float] = time.time,
        on_finding: Callable[[Finding], None] = lambda f: None,
    ) -> None:
        self.cfg, self.writer, self.retrier, self.stop = cfg, writer, retrier, stop
        self.boot, self.once, self.clock, self.on_finding = boot, once, clock, on_finding
        self.kind = resolve(cfg)
        self.path = cfg.path if cfg.source in ("auto", "file") else cfg.source
        self.acted = 0
        self.skipped = 0
        self._since: float | None = None  # act only on lines newer than this
        self._dedup = Dedup(cfg.dedup_window)

    def run(self) -> None:
        if self.kind == "none":
            return
        follow_log(
            self._follow,
            self.stop,
            self.once,
            f"fabric manager log {self.path}",
            rest_after_end=self.kind == "journal",  # journalctl ended: not a busy loop
        )

    def _catch_up(self) -> Iterator[str]:
        if self.kind == "file":
            return file_now(self.path)
        return journal_now(("-u", self.cfg.unit))

    def _live(self, idle: Callable[[], None]) -> Iterator[str]:
        if self.kind == "file":  # from the start again: the lines read so far are skipped
            return follow_file(
                self.path, from_start=True, stop=self.stop, poll=self.cfg.poll, idle=idle
            )
        return follow_journal(
            select_=("-u", self.cfg.unit),
            args=("-n", "0"),
            stop=self.stop,
            poll=self.cfg.poll,
            idle=idle,
        )

    def _follow(self) -> None:
        if self._since is None:
            node = self.retrier.call("read node", self.writer.read)
            fm = ann.fabric_state(node)
            mark = fm.get("t") if isinstance(fm, dict) else None
            self._since = max(boot_time(self.cfg.stat_file), float(mark or 0.0))
        log.info("fabric manager log %s: acting on lines after %s", self.path, _when(self._since))
        scanner = Scanner(dedup=False, fabric=True)
        read = 0
        for line in self._catch_up():
            read += 1
            for f in scanner.feed(line):
                self._handle(f, live=False)
        for f in scanner.flush():
            self._handle(f, live=False)
        if self.once:
            return
        skip = read if self.kind == "file" else 0
        last_line = self.clock()

        def quiet() -> None:
            # a GPU NVL record at the end of the log: its details have come by now, and
            # its fence must not wait for Fabric Manager's next line (scan/fmrecord.py)
            if self.clock() - last_line >= RECORD_WAIT:
                for f in scanner.expire():
                    self._handle(f, live=True)

        lines = self._live(quiet)
        try:
            for n, line in enumerate(lines, start=1):
                if n <= skip:
                    continue
                last_line = self.clock()
                for f in scanner.feed(line):
                    self._handle(f, live=True)
        finally:
            close = getattr(lines, "close", None)
            if close:
                close()

    def _handle(self, f: Finding, *, live: bool) -> None:
        self.on_finding(f)
        when = f.time if f.time is not None and f.clock == "wall" else None
        if when is None and not live:
            self.skipped += 1  # an old line without a time cannot be told from a handled one
            return
        stamp = when if when is not None else self.clock()
        if self._since is not None and stamp <= self._since:
            self.skipped += 1
            return
        if f.action not in FENCING_ACTIONS:
            log.info("fabric manager: %s (%s): %s", describe(f), f.action, f.message[:120])
            return
        if not self._dedup.admit(f, self.boot):
            return
        obs = Observation("kernel", "problem", f"{describe(f)} via fabric manager", f.action)
        evidence = {
            "rule": f.rule,
            "pci": f.pci,
            "action": f.action,
            "msg": f.message[:160],
            "at": now_rfc3339(self.clock),
            "t": stamp,
            "c": "wall",
        }
        out = self.retrier.call(
            "record fabric manager finding",
            lambda: self.writer.record_fabric(
                obs, boot=self.boot, when=stamp, clock="wall", evidence=evidence
            ),
        )
        self._since = stamp
        self.acted += 1
        if out.raised:
            log.warning(
                "fabric manager: %s (%s): raised repair=%s to repair=%s",
                describe(f),
                f.action,
                out.before_repair,
                out.raised,
            )
        elif not out.fenced and not out.held:
            log.info(
                "fabric manager: %s (%s); node already under repair (%s)",
                describe(f),
                f.action,
                out.before_repair,
            )


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else "the beginning"
