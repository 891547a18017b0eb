"""The lemon rule: each GPU remembered by identity, and the one that keeps failing sent to
a human as an RMA candidate instead of up the ladder again. Pure.

At every diagnose phase the node reports its GPUs (``fleetmedic gpus --json``,
model/gpufacts.py). :func:`judge` then

1. **maps the GPUs**: each by PCI address with its serial and UUID (NVIDIA) or serial and
   unique id (AMD). A GPU that does not answer now (fallen off the bus) keeps the identity
   last read at its PCI address (else at its index); one that is gone from the list
   altogether while the others answer is taken as lost;
2. **finds the GPUs this episode is about**: signs of a fault the tools read now (lost,
   uncorrectable ECC, a row-remap failure, unreservable bad pages), this boot's kernel-log
   faults and the agent's last finding, each named by PCI address, each put in its
   family by data/lemon_rules.yaml (a finding no family names is ``other``);
3. **records an incident** per GPU and family for the episode (model/gpus.py: on the Node
   and, through the controller, in its store, so a GPU moved to another node keeps its
   past);
4. **applies the rule**: a GPU with ``count`` incidents of one family in a *chain* (no
   repair between them held for ``window``, from the node's return to service, marked by
   the verify that passed, to the next fault; on whichever node) is an RMA candidate. A
   repair that held for the whole window breaks the chain, so the count starts over.

The chain rather than a sliding window: a GPU that fails every five days with a
seven-day window is a lemon (three in a chain on day ten), which "three within any seven
days" would never call it. The hold is counted from the return to service, not from the
fault: a repair that took a day must still hold the whole window. Each episode counts
once, whatever rungs it climbed.

Fences only go up: a candidate goes to ``manual``, never down; budgets and domains apply
unchanged, because this only changes which rung a node under repair goes to next.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.config.lemon import OTHER, Family, LemonConfig
from fleetmedic.model.gpufacts import GpuFacts, GpuReport
from fleetmedic.model.gpus import FleetHistory, Gpu, Incident, NodeRecord, merge, pci_key
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.flap import human
from fleetmedic.policy.history import parse_time, stamp

PHASE = "rma"
"""The in-flight phase that assembles an RMA candidate's case (playbooks/rma_case.yml),
after the step's diagnose phase and before the node goes to ``manual``."""
DRAIN_PHASE = "rma_drain"
"""Before the case's vendor diagnostics (DCGM level 3 loads every GPU), the pods that use
the GPUs leave, as for the diagnose state (``drain_gpu``)."""
RESULT = "rma-candidate"
"""The history result of the attempt the lemon rule ended."""
REPORT_KEY = "fleetmedic_gpus"
"""The diagnostics role publishes the node's report under this name (set_stats)."""


@dataclasses.dataclass(frozen=True)
class Implicated:
    """A GPU this episode is about, and why."""

    gpu: Gpu
    family: str
    why: str  # "lost", "xid.79 on 0000:28:00.0", ...


@dataclasses.dataclass(frozen=True)
class Lemon:
    """A GPU the rule calls an RMA candidate."""

    gpu: Gpu
    family: Family
    chain: tuple[Incident, ...]  # the incidents that count, oldest first

    @property
    def recommendation(self) -> str:
        return f"RMA candidate: GPU {self.gpu.serial or self.gpu.uid}"

    def summary(self) -> str:
        """``RMA candidate: GPU 1652... (GPU 1, bus-loss: 3 episodes, no repair held 7d)``."""
        return (
            f"{self.recommendation} (GPU {self.gpu.index}, {self.family.name}: "
            f"{len(self.chain)} episodes, no repair held {human(self.family.window)})"
        )


@dataclasses.dataclass(frozen=True)
class Judgement:
    record: NodeRecord  # the node's new GPU record
    implicated: tuple[Implicated, ...]
    incidents: tuple[Incident, ...]  # this episode's, new or not
    lemons: tuple[Lemon, ...]

    def headline(self) -> str | None:
        """The episode's GPU finding, for a person: ``GPU 1 lost`` (None: none named)."""
        return headline(self.implicated)


def report_of(data: Mapping[str, Any], node: str) -> GpuReport | None:
    """The node's report in a run's published data (None: the run published none)."""
    published = data.get(REPORT_KEY)
    if isinstance(published, Mapping):
        return GpuReport.from_json(published.get(node))
    return None


def judge(
    view: NodeView,
    report: GpuReport,
    fleet: FleetHistory,
    ep: int,
    now: datetime,
    cfg: LemonConfig,
) -> Judgement:
    """What this diagnose run's report means for the node's GPUs (see the module doc)."""
    at = stamp(now)
    old = NodeRecord.decode(view.annotations.get(keys.ANN_GPUS))
    gpus, missing = map_gpus(old, report, at)
    record_now = NodeRecord(gpus, old.incidents).adopt()
    mark = view.annotation_json(keys.ANN_LAST_FINDING)
    found = implicate(record_now, report, missing, mark, cfg)
    incidents = tuple(
        Incident(
            i.gpu.serial,
            i.gpu.uid,
            i.family,
            view.name,
            ep,
            at,
            i.why,
            i.gpu.index if i.gpu.index >= 0 else None,
            i.gpu.pci,
        )
        for i in found
    )
    named = [i for i in incidents if not i.pending]
    known = merge(record_now.incidents, *(fleet.of(i.key) for i in named), named)
    lemons = tuple(lemons_of(named, known, cfg)) if cfg.enabled else ()
    record = NodeRecord(gpus, tuple(merge(record_now.incidents, incidents)))
    return Judgement(record, tuple(found), incidents, lemons)


def learn(view: NodeView, report: GpuReport | None, now: datetime, ep: int) -> NodeRecord:
    """The node's record after its verify passed: episode ``ep``'s incidents back in
    service now, and (with a read of the GPUs) the GPUs as they answer now and the pending
    incidents named by them."""
    old = NodeRecord.decode(view.annotations.get(keys.ANN_GPUS)).returned(view.name, ep, stamp(now))
    if report is None or not report.gpus:
        return old
    gpus, _ = map_gpus(old, report, stamp(now))
    return NodeRecord(gpus, old.incidents).adopt()


def map_gpus(old: NodeRecord, report: GpuReport, at: str) -> tuple[tuple[Gpu, ...], list[Gpu]]:
    """(the node's GPUs now, those known before that are gone from the report). A GPU
    that answers gives its identity; one that does not keeps the one known at its PCI
    address (or index)."""
    out: list[Gpu] = []
    for f in report.gpus:
        before = old.gpu_at(f.pci) if f.pci else old.gpu_index(f.index)
        if f.serial or f.uid:
            out.append(Gpu(f.index, f.pci, f.serial, f.uid, f.model, at))
        elif before is not None:
            out.append(dataclasses.replace(before, index=f.index, pci=f.pci or before.pci))
        else:
            out.append(Gpu(f.index, f.pci, model=f.model))
    seen_pci = {pci_key(g.pci) for g in out if g.pci}
    seen_key = {g.key for g in out if g.key}
    missing = [  # (a GPU never named is a placeholder of the read that lost it: not kept)
        g
        for g in old.gpus
        if report.gpus and g.key and pci_key(g.pci) not in seen_pci and g.key not in seen_key
    ]
    return tuple(out) + tuple(missing), missing


def implicate(
    record: NodeRecord,
    report: GpuReport,
    missing: Sequence[Gpu],
    last_finding: Any,
    cfg: LemonConfig,
) -> list[Implicated]:
    """The GPUs this episode is about, one entry per GPU and family. A fault the kernel
    log names at an address no GPU is known at yet is held against that address (a
    pending incident), unless the tools already named a GPU with that fault."""
    found: dict[tuple[int | str, str], Implicated] = {}

    def add(gpu: Gpu | None, family: str, why: str) -> None:
        if gpu is not None:
            where: int | str = gpu.index if gpu.index >= 0 else pci_key(gpu.pci)
            found.setdefault((where, family), Implicated(gpu, family, why))

    families = cfg.all()
    for f in report.gpus:
        gpu = _gpu_of(record, f)
        for signal in f.signals:
            add(gpu, family_of(families, signal=signal), _said(signal, f))
    for g in missing:
        add(g, family_of(families, signal="lost"), "gone from the GPU list")
    named = [(f.rule, f.pci) for f in report.logged]
    if isinstance(last_finding, Mapping) and last_finding.get("rule") and last_finding.get("pci"):
        named.append((str(last_finding["rule"]), str(last_finding["pci"])))
    for rule, pci in named:
        family = family_of(families, rule=rule)
        gpu = record.gpu_at(pci)
        if gpu is None and any(fam == family for _, fam in found):
            continue  # (a GPU the tools named already: the same fault, seen twice)
        add(gpu or Gpu(-1, pci), family, _where(rule, pci))
    return sorted(found.values(), key=lambda i: (i.gpu.index < 0, i.gpu.index, i.family))


def _said(signal: str, f: GpuFacts) -> str:
    """The signal in the tool's own words: ``GPU_IS_LOST``, ``2 uncorrectable ECC``."""
    errors = f.rma.get("errors")
    if signal == "lost" and isinstance(errors, list) and errors:
        return str(errors[0])
    if signal == "ecc_uncorrected":
        n = f.rma.get("ecc_volatile_uncorrected")
        return f"{n} uncorrectable ECC" if n else "uncorrectable ECC"
    words = {"row_remap_failure": "row remap failure", "bad_pages_unreservable": "bad pages"}
    return words.get(signal, signal)


def _gpu_of(record: NodeRecord, f: GpuFacts) -> Gpu | None:
    return (record.gpu_at(f.pci) if f.pci else None) or record.gpu_index(f.index)


def _where(rule: str, pci: str) -> str:
    return f"{rule} on {pci}" if pci else rule


def family_of(families: Iterable[Family], *, rule: str = "", signal: str = "") -> str:
    for f in families:
        if (rule and rule in f.rules) or (signal and signal in f.signals):
            return f.name
    return OTHER


def chain(incidents: Sequence[Incident], window: float) -> tuple[Incident, ...]:
    """The newest incident and those before it whose repair held less than ``window``
    seconds: from its return to service (``back``; else from the incident itself) to the
    next incident (one per episode and node; ``incidents`` of one GPU and family)."""
    ordered = sorted(merge(incidents), key=lambda i: i.at)
    if not ordered:
        return ()
    out = [ordered[-1]]
    for inc in reversed(ordered[:-1]):
        newer, held_from = parse_time(out[-1].at), parse_time(inc.back or inc.at)
        if newer is None or held_from is None or newer - held_from > timedelta(seconds=window):
            break
        out.append(inc)
    return tuple(reversed(out))


def lemons_of(now: Iterable[Incident], known: Sequence[Incident], cfg: LemonConfig) -> list[Lemon]:
    """The GPUs of this episode's incidents that the rule calls RMA candidates."""
    out: dict[str, Lemon] = {}
    for inc in now:
        family = cfg.family(inc.family)
        if family is None or family.count <= 0 or inc.key in out:
            continue
        same = [k for k in known if k.key == inc.key and k.family == inc.family]
        got = chain(same, family.window)
        if len(got) >= family.count:
            gpu = Gpu(inc.index if inc.index is not None else -1, "", inc.serial, inc.uid)
            out[inc.key] = Lemon(gpu, family, got)
    return list(out.values())


def may_be_lemon(record: NodeRecord, now: datetime, cfg: LemonConfig) -> bool:
    """A GPU of ``record`` one episode short of its family's count, its chain's last
    episode within the window of ``now``."""
    by: dict[tuple[str, str], list[Incident]] = {}
    for inc in record.incidents:
        if not inc.pending:
            by.setdefault((inc.key, inc.family), []).append(inc)
    for (_, fam), incs in by.items():
        family = cfg.family(fam)
        if family is None or family.count <= 0:
            continue
        got = chain(incs, family.window)
        last = parse_time(got[-1].back or got[-1].at) if got else None
        within = last is not None and now - last <= timedelta(seconds=family.window)
        if within and len(got) + 1 >= family.count:
            return True
    return False


def headline(implicated: Sequence[Implicated]) -> str | None:
    """``GPU 1 lost`` / ``GPU 3 uncorrectable ECC (xid.48)``: the first GPU finding."""
    if not implicated:
        return None
    first = implicated[0]
    said = {
        "bus-loss": "lost",
        "memory-uncorrectable": "uncorrectable memory errors",
        "memory-exhausted": "out of spare memory rows",
    }.get(first.family, first.why)
    more = f" (+{len(implicated) - 1} more)" if len(implicated) > 1 else ""
    return f"GPU {first.gpu.index} {said}{more}"


def repeat_offenders(
    record: NodeRecord, now: datetime, cfg: LemonConfig, fleet: FleetHistory | None = None
) -> list[tuple[Gpu | None, str, int]]:
    """``(GPU, family, episodes in its current chain)`` for GPUs with two or more, the
    most first (``fleetmedic status``, metrics): chains that ended more than a window ago
    are not counted."""
    by: dict[tuple[str, str], list[Incident]] = {}
    here = {g.key for g in record.gpus} | {i.key for i in record.incidents}
    extra = [i for i in fleet.all() if i.key in here] if fleet is not None else []
    for inc in merge(record.incidents, extra):
        by.setdefault((inc.key, inc.family), []).append(inc)
    out = []
    for (key, fam), incs in by.items():
        family = cfg.family(fam)
        window = family.window if family else cfg.longest_window() or 30 * 86400.0
        got = chain(incs, window)
        last = parse_time(got[-1].back or got[-1].at) if got else None
        if len(got) >= 2 and last is not None and now - last <= timedelta(seconds=window):
            gpu = next((g for g in record.gpus if g.key == key), None)
            out.append((gpu, fam, len(got)))
    return sorted(out, key=lambda t: -t[2])
