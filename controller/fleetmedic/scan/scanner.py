"""The streaming scanner: lines in, :class:`Finding` objects out.

Typical use by the agent (one scanner for the life of the process, its
dedup state saved between restarts)::

    from fleetmedic.scan import Dedup, Scanner, current_boot_id, follow_kmsg

    boot = current_boot_id()
    dedup = Dedup.from_state(saved) if saved else Dedup(replay_guard=True)
    dedup.forget_boots_except(boot)
    scanner = Scanner(boot_id=boot, dedup=dedup)
    for finding in scanner.scan(follow_kmsg(stop=stop_event)):
        act_on(finding)
        saved = dedup.to_state()

and by ``fleetmedic scan`` for files (bulk path, pre-filtered in C)::

    findings = list(Scanner().scan_path("/var/log/kern.log"))

What the scanner adds on top of :func:`~fleetmedic.scan.classify.classify`:

- line numbers and timestamps (:mod:`fleetmedic.scan.parser`);
- multi-line messages: ``NVRM: The NVIDIA GPU 0000:b3:00.0`` followed, on the
  next lines, by ``... has fallen off the bus`` gives the finding that PCI
  id; a ``/dev/kmsg`` record read whole (as :func:`follow_kmsg` yields it)
  lends its ``DEVICE=+pci:...`` dictionary line when the message names no
  device. Known gap: in a file of kmsg records read line by line the
  dictionary lines are skipped, not attached;
- boots: with ``boot_id`` given, every finding belongs to that boot and the
  dedup replay guard is on. Without it, each GPU driver load (``NVRM:
  loading NVIDIA UNIX ...``, ``[drm] amdgpu kernel modesetting enabled``)
  starts a new boot segment, so a file spanning reboots reports a fault
  again after each reboot. Known gap: a reboot that does not load a GPU
  driver is not seen (it cannot produce GPU faults either);
- multi-line reports are one finding, even with dedup off: the follow-up lines
  of a report (an SXid event's ``Data {...}`` and ``Severity N Engine ...``
  lines, an amdgpu page fault's ``in page starting at address`` and
  ``*_L2_PROTECTION_FAULT_STATUS`` lines: the catalog's ``parts`` and
  ``continued_by``) join the finding of its first line, as long as they follow
  within :data:`REPORT_LINES` lines, name the same device and code, and ask for
  nothing stronger (a stronger one is its own finding: an escalation is never
  lost). A part seen twice starts the next report;
- records the log cut in two (the catalog's ``joins``: an Xid 154 line wrapped before
  its new recovery action, the old powerplay code's ``[powerplay]`` head and its
  message on the next line): the head is held and joined with the next line when
  that one continues it, else classified alone;
- multi-line records (the catalog's ``record_details``: a Fabric Manager GPU NVL record's
  head line and its dozen ``key : value`` lines): the head's finding is held while
  detail lines follow, back to back and without a timestamp of their own, at most
  :data:`fmrecord.MAX_DETAILS`; any other line (the next timestamped one, a blank
  one), the end of the input or :meth:`Scanner.expire` in a follower ends the record,
  and the finding comes out with what its lines said (:func:`fmrecord.decorate`). A
  record cut short still gives its finding, with the details it got;
- a report whose first line names no process (a newer amdgpu page fault prints
  ``Process python3 pid 15615 thread ...`` on its second line) is held until its next
  line, which lends the finding its process and pid. Held findings come out with the
  next line fed, or from :meth:`Scanner.flush` (every ``scan*`` method calls it at
  the end of its input; a follower that waits on a quiet log keeps a held line until
  the next one);
- the safety net (:mod:`fleetmedic.scan.net`, on by default): a GPU driver line
  that no rule matches but that was logged at ``err`` or says a failure word
  becomes an ``<driver>.unclassified`` finding (action ``monitor``);
- dedup (:class:`~fleetmedic.scan.dedup.Dedup`), on by default.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from fleetmedic.scan import catalog as catalog_mod
from fleetmedic.scan import fmrecord, parser, prefilter, regexcache
from fleetmedic.scan import net as netmod
from fleetmedic.scan import pci as pcimod
from fleetmedic.scan.classify import Classified, classify
from fleetmedic.scan.dedup import Dedup
from fleetmedic.scan.finding import Finding

DRIVER_LOADS = ("NVRM: loading NVIDIA UNIX", "amdgpu kernel modesetting enabled")
"""Messages the GPU drivers print once per load, i.e. once per boot (or driver
reinstall). They mark boot segments in a file whose boot id is unknown. (The
kernel's own "Linux version" banner would do too, but it shares no search key
with the GPU lines and would cost the bulk pre-filter a whole extra pass.)"""

_GPU_HEADER = regexcache.compile(r"NVRM: The NVIDIA GPU (\S+)")
_HINT_LINES = 4
_CACHE_SIZE = 4096
_DEVICE = regexcache.compile(r"^ DEVICE=\+pci:(\S+)", re.M)
_PROCESS = regexcache.compile(r"\b[Pp]rocess (?P<process>\S+) pid (?P<pid>\d+) thread")
FABRIC = "fabricmanager"
"""The rule kind of Fabric Manager's log (data/fabricmanager_catalog.yaml)."""
_FABRIC_LOG = regexcache.compile(
    r"^\[[A-Z][a-z]{2} [ \d]\d \d{4} \d\d:\d\d:\d\d\] \[[A-Z]+\] \[tid \d+\]|fabricmanager|"
    r"fabric manager|Fabric Manager",
    re.M,
)
_KERNEL_ONLY: dict[int, catalog_mod.Catalog] = {}


def is_fabric_log(head: str) -> bool:
    """Does this text (a file's first lines) come from NVIDIA Fabric Manager's log or unit?
    ``fleetmedic scan`` then adds the Fabric Manager rules, whose literals would slow the
    scan of every kernel log (each trigger literal costs the bulk pre-filter a share)."""
    return _FABRIC_LOG.search(head) is not None


def kernel_catalog(catalog: catalog_mod.Catalog) -> catalog_mod.Catalog:
    """``catalog`` without the Fabric Manager rules (kept per catalog)."""
    found = _KERNEL_ONLY.get(id(catalog))
    if found is None or found.sources is not catalog.sources:
        rules = tuple(r for r in catalog.rules if r.kind != FABRIC)
        found = _KERNEL_ONLY[id(catalog)] = dataclasses.replace(catalog, rules=rules)
    return found


REPORT_LINES = 4
"""A follow-up line joins a report when it comes within this many lines of the
report's previous line (drivers print a report's lines back to back)."""


class _Report:
    """The report the last finding opened: where, what, and which parts it has.
    ``finding`` is set only while it is held for its process (``awaits_process``): a
    finding is built only when it passes dedup or is held.

    This and the two classes below are plain classes, not dataclasses: building a
    dataclass costs every ``fleetmedic scan`` about 1 % of its start-up."""

    __slots__ = ("finding", "identity", "last_line", "parts", "pci", "rank", "rule")

    def __init__(
        self,
        last_line: int,
        identity: tuple[str, str, str],
        rank: int,
        rule: catalog_mod.Rule | None,
        pci: str | None,
        part: str,
    ) -> None:
        self.last_line = last_line
        self.identity = identity
        self.rank = rank
        self.rule = rule
        self.pci = pci
        self.parts = {part}
        self.finding: Finding | None = None


class _Record:
    """The detail lines read so far of the held multi-line record (``record_details``)."""

    __slots__ = ("details", "last_line", "lines")

    def __init__(self, last_line: int, details: dict[str, str]) -> None:
        self.last_line = last_line
        self.lines = 0
        self.details = details


class _Facts:
    """A classification and what the scanner needs of it besides the finding: its rule,
    which part of a report it is, its dedup identity without the device, its rank."""

    __slots__ = ("code", "found", "kind", "part", "rank", "rule")

    def __init__(self, found: Classified, rule: catalog_mod.Rule | None, part: str) -> None:
        self.found = found
        self.rule = rule
        self.part = part
        _pci, self.kind, self.code = found.identity()
        self.rank = found.rank


class _Known:
    """Everything the scanner decides from a message's text alone, kept per distinct text
    (a storm repeats it; a log's candidate lines differ mostly in their prefixes): its
    classification, a driver's load banner, an ``NVRM: The NVIDIA GPU`` header's device,
    the cut record it is the head of."""

    __slots__ = ("facts", "header", "header_pci", "join", "loads")

    def __init__(
        self,
        facts: _Facts | None,
        loads: bool,
        header: bool,
        header_pci: str | None,
        join: catalog_mod.Join | None,
    ) -> None:
        self.facts = facts
        self.loads = loads
        self.header = header
        self.header_pci = header_pci
        self.join = join


class Scanner:
    """Classify lines one at a time, keeping the little state that needs.

    - ``catalog``: defaults to the packaged catalog (:func:`catalog.load`).
    - ``boot_id``: the kernel boot id of the lines (``/proc/sys/kernel/random/boot_id``),
      if known; it becomes part of every finding and of the dedup identity.
    - ``dedup``: ``True`` (default) for a fresh :class:`Dedup` (replay guard
      on when ``boot_id`` is given), ``False`` for none, or a :class:`Dedup`
      to share or restore state.
    - ``net``: the safety net for driver lines no rule knows (default on).
    - ``fabric``: also the Fabric Manager rules (for its log: the agent's Fabric Manager
      source, ``fleetmedic scan`` of a file :func:`is_fabric_log` recognises); off for
      kernel logs, whose bulk scan they would slow.
    """

    def __init__(
        self,
        catalog: catalog_mod.Catalog | None = None,
        *,
        boot_id: str | None = None,
        dedup: Dedup | bool = True,
        net: bool = True,
        fabric: bool = False,
    ) -> None:
        full = catalog or catalog_mod.load()
        self.catalog = full if fabric else kernel_catalog(full)
        self.net = net
        self.boot_id = boot_id or None
        if dedup is True:
            self.dedup: Dedup | None = Dedup(replay_guard=self.boot_id is not None)
        else:
            self.dedup = dedup if isinstance(dedup, Dedup) else None
        self.lines_read = 0
        self._segment = 0
        self._hint: tuple[int, str] | None = None
        self._known: dict[str, _Known] = {}
        self._report: _Report | None = None
        self._net_cache: dict[tuple[str, int | None], _Facts | None] = {}
        self.triggers: tuple[str, ...] = self.catalog.triggers
        # one C-level pass over the line instead of one substring test per trigger
        self._trigger = regexcache.compile("|".join(re.escape(t) for t in self.triggers))
        regexcache.shared().save()  # compiled after the catalog's load saved: keep it too
        self._rules = {rule.id: rule for rule in self.catalog.rules}
        self._cut_heads = self.catalog.cut_heads
        self._held: tuple[int, parser.Fields, str, catalog_mod.Join] | None = None
        self._pending: Finding | None = None
        self._record: _Record | None = None  # the held record's details, with _pending
        self._record_heads = tuple(
            dict.fromkeys(r.requires for r in self.catalog.rules if r.record_details)
        )

    @property
    def boot_key(self) -> str:
        """The boot the next finding belongs to (for dedup)."""
        return self.boot_id or f"segment-{self._segment}"

    def feed(self, line: str | bytes, lineno: int | None = None) -> list[Finding]:
        """Classify one line (a ``/dev/kmsg`` record may include its dictionary lines).

        ``lineno`` is the 1-based line number; by default the scanner counts.
        Returns zero or one finding (a list, so callers can ``extend``).
        Never raises on any input.
        """
        if lineno is None:
            self.lines_read += 1
            lineno = self.lines_read
        else:
            self.lines_read = max(self.lines_read, lineno)
        text = line.decode("utf-8", "replace") if isinstance(line, (bytes, bytearray)) else line
        return self._feed_line(text, lineno)

    def _feed_line(self, text: str, lineno: int) -> list[Finding]:
        if self._trigger.search(text) is None:
            return self._feed_second_half(text, lineno)
        return self._feed_candidate(text, lineno)

    def _feed_second_half(self, text: str, lineno: int) -> list[Finding]:
        """A line without a trigger counts only as a held record's detail line or the
        second half of a held cut record."""
        if self._record is not None:
            if self._detail(text, lineno):
                return []
            out = self._emit_pending()  # any other line ends the record
            return out + self._second_half(text, lineno) if self._held is not None else out
        if self._held is None:
            return []  # the common case: one test per line (the agent's line-by-line scan)
        return self._second_half(text, lineno)

    def _second_half(self, text: str, lineno: int) -> list[Finding]:
        held = self._held
        if held is None or lineno != held[0] + 1:
            return []
        self._held = None
        head_line, head, head_text, join = held
        record = parser.fields(text)
        if join.continues(record[0]):
            return self._emit_pending() + self._joined(head, head_line, head_text, record)
        return self._emit_pending() + self._process(head, head_line, head_text)

    def _detail(self, text: str, lineno: int) -> bool:
        """Is this line the next detail line of the held record? (Then it is kept.)"""
        record = self._record
        if record is None or lineno != record.last_line + 1 or record.lines >= fmrecord.MAX_DETAILS:
            return False
        fields = parser.fields(text)
        if fields[1] is not None:  # a line with its own timestamp starts something else
            return False
        said = fmrecord.DETAIL.fullmatch(fields[0])
        if said is None:
            return False
        record.details.setdefault(said.group(1), said.group(2).strip())
        record.lines += 1
        record.last_line = lineno
        return True

    def _joined(
        self, head: parser.Fields, head_line: int, head_text: str, tail: parser.Fields
    ) -> list[Finding]:
        joined = f"{head[0].rstrip()} {tail[0].strip()}"
        return self._process((joined, *head[1:]), head_line, head_text)

    def _feed_candidate(self, text: str, lineno: int) -> list[Finding]:
        if self._record is not None and self._detail(text, lineno):
            return []
        record = parser.fields(text)
        message = record[0]
        out: list[Finding] = []
        held = self._held
        if held is not None:
            self._held = None
            head_line, head, head_text, join = held
            if (
                lineno == head_line + 1
                and join.continues(message)
                and not any(lit in message for lit in self.triggers)
            ):
                return self._emit_pending() + self._joined(head, head_line, head_text, record)
            out += self._emit_pending() + self._process(head, head_line, head_text)
        known = self._known.get(message) or self._learn(message)
        if known.join is not None:
            self._held = (lineno, record, text, known.join)
            return out + self._emit_pending()
        found = self._process(record, lineno, text, known)
        return out + found if out else found

    def flush(self) -> list[Finding]:
        """Findings held for a next line that did not come (the end of the input)."""
        out: list[Finding] = []
        held, self._held = self._held, None
        if held is not None:
            out += self._emit_pending() + self._process(held[1], held[0], held[2])
        return out + self._emit_pending()

    def expire(self) -> list[Finding]:
        """End a held multi-line record now (a follower whose log went quiet: the agent
        calls this after :data:`fmrecord.RECORD_WAIT` seconds without a line, so a
        record at the end of the log is not held until the next one comes)."""
        if self._record is None:
            return []
        return self._emit_pending()

    def _emit_pending(self) -> list[Finding]:
        found = self._pending
        if found is None:
            return []
        self._pending = None
        record, self._record = self._record, None
        if record is not None:
            found = fmrecord.decorate(found, record.details, self.catalog.xids)
        if self.dedup is not None and not self.dedup.admit(found, self.boot_key):
            return []
        return [found]

    def _process(
        self, record: parser.Fields, lineno: int, text: str, known: _Known | None = None
    ) -> list[Finding]:
        message = record[0]
        if known is None:
            known = self._known.get(message) or self._learn(message)
        if known.loads and self.boot_id is None:
            self._segment += 1
            self._hint = None
            self._report = None
            return self._emit_pending()
        if self._report is not None and self._continues(message, lineno):
            return []
        out = self._emit_pending() if self._pending is not None else []
        facts = known.facts
        if facts is None:
            if known.header:
                pci = known.header_pci
                self._hint = (lineno, pci) if pci else None
                return out
            facts = self._unclassified(message, record[5]) if self.net else None
            if facts is None:
                return out
        found = facts.found
        pci = found.pci
        if pci is None:
            pci = self._device(found, record, lineno, text)
        when = parser.seconds(record[1], record[2])
        clock = parser.clock_of(record[2], when)
        identity = (pci or "", facts.kind, facts.code)
        report = self._report
        if (
            report is not None
            and lineno - report.last_line <= REPORT_LINES
            and facts.part not in report.parts
            and identity == report.identity
            and facts.rank <= report.rank
        ):  # another line of the open report: dropped
            report.parts.add(facts.part)
            report.last_line = lineno
            return out
        report = self._report = _Report(lineno, identity, facts.rank, facts.rule, pci, facts.part)
        if facts.rule is not None and facts.rule.record_details:
            # its detail lines follow: held until they end (dedup admits it then)
            head, details = fmrecord.inline(found.message)
            self._record = _Record(lineno, details)
            held = found.placed(lineno, pci, record[1], when, clock, self.boot_id)
            if details:  # the journal's one-line form
                held = dataclasses.replace(held, message=head)
            report.finding = self._pending = held
            return out
        if facts.rule is not None and facts.rule.awaits_process and found.pid is None:
            # its next line may name the process
            report.finding = self._pending = found.placed(
                lineno, pci, record[1], when, clock, self.boot_id
            )
            return out
        if self.dedup is not None and not self.dedup.admit_identity(
            self.boot_key, identity, when, clock, facts.rank
        ):
            return out
        out.append(found.placed(lineno, pci, record[1], when, clock, self.boot_id))
        return out

    def _continues(self, message: str, lineno: int) -> bool:
        """A follow-up line of the open report that the catalog names (``continued_by``)."""
        report = self._report
        if report is None or lineno - report.last_line > REPORT_LINES:
            return False
        rule = report.rule
        if rule is None or rule.continued_by is None or not rule.continued_by.search(message):
            return False
        pci = pcimod.find(message)
        if pci is not None and report.pci is not None and pci != report.pci:
            return False
        report.last_line = lineno
        pending = self._pending
        if pending is not None and pending is report.finding:
            named = _PROCESS.search(message)
            if named is not None:
                pid = int(named.group("pid"))
                self._pending = report.finding = dataclasses.replace(
                    pending, process=named.group("process"), pid=pid or None
                )
        return True

    def _learn(self, message: str) -> _Known:
        """What ``message`` means (:class:`_Known`), computed once per distinct text: an
        Xid storm repeats the same text many times."""
        join = None
        for candidate in self.catalog.joins:
            if candidate.requires in message and candidate.head.match(message):
                join = candidate
                break
        found = classify(message, self.catalog)
        header = _GPU_HEADER.search(message) if found is None else None
        known = _Known(
            facts=self._facts(found, message) if found is not None else None,
            loads=any(marker in message for marker in DRIVER_LOADS),
            header=header is not None,
            header_pci=pcimod.normalize(header.group(1)) if header is not None else None,
            join=join,
        )
        if len(self._known) >= _CACHE_SIZE:
            self._known.clear()
        self._known[message] = known
        return known

    def _facts(self, found: Classified, message: str) -> _Facts:
        return _Facts(found, self._rules.get(found.rule), self._part(found, message))

    def _part(self, finding: Finding, message: str) -> str:
        if finding.kind == "sxid":
            for name, regex in self.catalog.sxid_parts.items():
                if regex.search(message):
                    return name
        return "head"

    def _unclassified(self, message: str, level: int | None) -> _Facts | None:
        """:func:`net.unclassified`, memoised like :meth:`_learn`."""
        key = (message, level)
        try:
            return self._net_cache[key]
        except KeyError:
            pass
        found = netmod.unclassified(message, level, self.catalog)
        facts = self._facts(found, message) if found is not None else None
        if len(self._net_cache) >= _CACHE_SIZE:
            self._net_cache.clear()
        self._net_cache[key] = facts
        return facts

    def _device(
        self, found: Classified, record: parser.Fields, lineno: int, text: str
    ) -> str | None:
        """The device of a finding whose line names none: a ``/dev/kmsg`` record's
        ``DEVICE=`` line, else a recent ``NVRM: The NVIDIA GPU`` header's."""
        pci = None
        if record[3] and "\n" in text:
            device = _DEVICE.search(text)
            pci = pcimod.normalize(device.group(1)) if device else None
        if pci is None and found.vendor == "nvidia" and self._hint is not None:
            hint_line, hint_pci = self._hint
            if 0 <= lineno - hint_line <= _HINT_LINES:
                pci = hint_pci
        return pci

    def scan(self, lines: Iterable[str | bytes]) -> Iterator[Finding]:
        """Findings from an iterable of lines (a list, a file, a follower), lazily."""
        for line in lines:
            yield from self.feed(line)
        yield from self.flush()

    def scan_binary(
        self,
        stream: BinaryIO,
        chunk_size: int = prefilter.CHUNK_SIZE,
        engine: str | None = None,
        mapped: bool = False,
    ) -> Iterator[Finding]:
        """Findings from a binary stream read in big chunks (the fast path for files).

        Same results as :meth:`scan` over the stream's lines; only candidate
        lines are decoded. ``engine`` picks the literal search
        (:mod:`fleetmedic.scan.literals`; default: the fastest installed).
        Afterwards :attr:`lines_read` is the stream's line count. ``mapped``: a regular
        file is read through a memory map (:func:`prefilter.candidates`: the bulk scan's).
        """
        return self._from_candidates(
            prefilter.candidates(
                stream,
                self._byte_triggers(),
                chunk_size,
                engine=engine,
                follow=self._byte_cuts(),
                mapped=mapped,
            )
        )

    def scan_path(self, path: str, jobs: int = 1, engine: str | None = None) -> Iterator[Finding]:
        """Findings from a file; with ``jobs`` > 1 a big file is pre-filtered by that many
        processes.

        Results are identical to :meth:`scan_binary`; only the pre-filter (the
        literal search and the line count) runs in parallel, classification
        and dedup stay in this process and in file order. Files smaller than
        :data:`prefilter.PARALLEL_MIN_BYTES` are always read in-process.
        """
        if (
            jobs > 1
            and os.path.isfile(path)
            and os.path.getsize(path) >= prefilter.PARALLEL_MIN_BYTES
        ):
            return self._from_candidates(
                prefilter.candidates_parallel(
                    path, self._byte_triggers(), jobs, engine, self._byte_cuts()
                )
            )
        return self._scan_opened(path, engine)

    def _scan_opened(self, path: str, engine: str | None) -> Iterator[Finding]:
        with open(path, "rb") as handle:
            yield from self.scan_binary(handle, engine=engine, mapped=True)

    def _byte_triggers(self) -> list[bytes]:
        return [t.encode() for t in self.triggers]

    def _byte_cuts(self) -> list[bytes]:
        """The literals after whose line the bulk pre-filter brings the next line too: a
        cut record's head, and a multi-line record's head and detail lines (each detail
        line holds :data:`fmrecord.FOLLOW`, so the chain goes on while details do)."""
        cuts = self._cut_heads + self._record_heads
        if self._record_heads:
            cuts += (fmrecord.FOLLOW,)
        return [t.encode() for t in cuts]

    def _from_candidates(self, generator: Iterator[tuple[int, bytes]]) -> Iterator[Finding]:
        base = self.lines_read
        while True:
            try:
                lineno, raw = next(generator)
            except StopIteration as stop:
                self.lines_read = base + (stop.value or 0)
                yield from self.flush()
                return
            self.lines_read = base + lineno
            yield from self._feed_line(raw.decode("utf-8", "replace"), base + lineno)
